"""The contracts: Avro event schemas (``avro/``), the shared vocabulary and event validation."""
