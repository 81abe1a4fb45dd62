"""A real MCP server on the mcp 2.x SDK (`MCPServer`), run from its own venv (`make venv-mcp2`):
`python mcp2_server.py PORT` serves Streamable HTTP, stateless, so MCP's 2026-07-28 revision (one
self-contained POST per request) and the earlier handshake revisions both reach it."""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("studio-mcp2-tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Repeat the text in capitals."""
    return text.upper()


@server.tool()
def slow(seconds: float) -> str:
    """Wait, then answer."""
    time.sleep(seconds)
    return "finally"


@server.tool()
def boom() -> str:
    """Always fails."""
    raise ValueError("the tool broke")


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def read_secrets() -> str:
    """A tool no environment should allow."""
    return "hunter2"


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]), stateless_http=True)
