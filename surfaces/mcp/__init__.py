"""The MCP server: the REST API's operations as MCP tools, over streamable HTTP at
``/mcp/`` and over stdio (``manage.py mcp_stdio``)."""
