"""The HTTP API: reads from tenants' stores, writes by producing events."""
