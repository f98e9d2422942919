"""The MCP server: the API's routes as MCP tools, over stdio (``engram mcp``) and streamable HTTP
(mounted in the API at ``/mcp``).

One implementation for both transports: each tool is an HTTP call to one of the API's own routes
with the caller's bearer token (over stdio through httpx to ``ENGRAM_URL``; in the mounted app
through httpx's ASGI transport to the app itself, in process), so authentication, governance,
validation and their refusals are the API's, word for word. A tool's input schema is the route's
own (its path and query parameters and its body model, from the API's OpenAPI document), and
``remember``'s is the typed memory tool the ontology generates (``GET …/memory-tool``).
"""
