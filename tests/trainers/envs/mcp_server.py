"""A real FastMCP server for the MCP tests: `python mcp_server.py stdio` or `python mcp_server.py http PORT`."""

from __future__ import annotations

import os
import sys
import time

from fastmcp import FastMCP

server = FastMCP("studio-test-tools")


@server.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool
def shout(text: str) -> str:
    """Repeat the text in capitals."""
    return text.upper()


@server.tool
def slow(seconds: float) -> str:
    """Wait, then answer."""
    time.sleep(seconds)
    return "finally"


@server.tool
def boom() -> str:
    """Always fails."""
    raise ValueError("the tool broke")


@server.tool
def pid() -> int:
    """The server's process id (the tests kill it)."""
    return os.getpid()


@server.tool
def read_secrets() -> str:
    """A tool no environment should allow."""
    return "hunter2"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio", show_banner=False, log_level="error")
    else:
        server.run("http", host="127.0.0.1", port=int(sys.argv[2]), show_banner=False, log_level="error")
