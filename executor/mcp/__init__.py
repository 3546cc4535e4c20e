"""toolpool as an MCP server (``toolpool mcp``): the pool's tools for any MCP client.

Needs the ``mcp`` extra (``pip install 'toolpool[mcp]'``). Two transports:

- ``serve_stdio``: for a client that starts the server as a subprocess (desktop assistants,
  coding agents, IDEs);
- ``serve_http``: streamable HTTP at ``/mcp``, one server for many clients, with an optional
  bearer token.
"""

from __future__ import annotations

from executor.mcp._policy import ServerPolicy
from executor.mcp._server import PoolServer, mcp_result, mcp_tool
from executor.mcp._transports import http_app, serve_http, serve_stdio

__all__ = [
    "PoolServer",
    "ServerPolicy",
    "http_app",
    "mcp_result",
    "mcp_tool",
    "serve_http",
    "serve_stdio",
]
