"""Tools from MCP servers for any tool-using environment.

An environment's config lists servers (`mcp_servers`, the schema fragment `MCP_SERVERS_SCHEMA` in
`trainers.envs`); each is a stdio command (`command: ["python", "server.py"]`, spawned on the worker)
or a Streamable HTTP URL (`url: "http://127.0.0.1:8000/mcp"`). `tools/list` becomes tools shown to
the model (a `ToolSpec` with the tool's input JSON schema), `tools/call` runs a call. Least
privilege, per server:

- `allow_tools`: the tools the model may see and call (required; `["*"]` opts in to all of them);
- `max_calls`: calls per episode to this server (the environment's own `max_tool_calls` applies too);
- `timeout_s`: the limit of one call; past it the call is an `Error:` observation, never a hang;
- arguments are checked against the tool's input schema before anything is sent (`ToolEnvironment`).

A refused, failed or timed-out call, and a server that died, are `ToolError`s: the model sees
`Error: …`, the episode goes on. A server that cannot be reached when the environment is built is a
`McpServerError` (the run fails with that reason).

The MCP client is asynchronous and environments are synchronous: one background thread per process
runs an event loop (`McpHub`) holding one session per configured server, shared by every
environment built from the same config (the trainer builds one per episode; spawning a stdio
server per episode would cost about a second each). An environment holds a reference while it lives
(`close()` releases it); a session nobody holds closes after `linger_s` (so consecutive steps reuse
it), every session closes at interpreter exit, and `close_all()` closes them now. The hub's lock is
never waited for on the loop's thread (a caller holding it may be waiting for the loop).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import tempfile
import threading
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from trainers.envs.tools import ToolError, clip_output
from trainers.types import ToolCall, ToolSpec

log = logging.getLogger(__name__)

T = TypeVar("T")
CONNECT_TIMEOUT_S = 30.0
LINGER_S = 120.0
ALL_TOOLS = "*"


class McpServerError(RuntimeError):
    """An MCP server could not be started, reached or listed when an environment was built."""


@dataclass(frozen=True)
class McpServer:
    """One server of an environment's `mcp_servers` list."""

    name: str
    command: tuple[str, ...] = ()
    url: str = ""
    allow_tools: tuple[str, ...] = ()
    max_calls: int = 8
    timeout_s: float = 10.0
    cwd: str = ""
    env: tuple[tuple[str, str], ...] = ()
    protocol: str = "auto"  # a url's MCP revision: "2026-07-28" (stateless), "session", or auto

    @classmethod
    def from_config(cls, data: dict[str, Any]) -> McpServer:
        command, url = list(data.get("command") or []), str(data.get("url") or "")
        if bool(command) == bool(url):
            raise ValueError(f"MCP server {data.get('name')!r}: give either a command or a url")
        return cls(
            name=str(data["name"]),
            command=tuple(str(c) for c in command),
            url=url,
            allow_tools=tuple(data.get("allow_tools") or ()),
            max_calls=int(data.get("max_calls", 8)),
            timeout_s=float(data.get("timeout_s", 10.0)),
            cwd=str(data.get("cwd") or ""),
            env=tuple(sorted((str(k), str(v)) for k, v in (data.get("env") or {}).items())),
            protocol=str(data.get("protocol") or "auto"),
        )

    @property
    def connection_key(self) -> str:
        """Environments whose servers start the same way share one session."""
        return json.dumps([self.command, self.url, self.cwd, self.env, self.protocol])

    def allows(self, tool: str) -> bool:
        return ALL_TOOLS in self.allow_tools or tool in self.allow_tools

    def describe(self) -> str:
        return self.url or " ".join(self.command)


class _Connection:
    """One MCP session, living on the hub's event loop."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.client: Any = None
        self.stack: AsyncExitStack | None = None
        self.tools: list[Any] = []
        self.stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self.refs = 0
        self.dead: str | None = None  # why the session stopped working
        self.closer: asyncio.TimerHandle | None = None
        self.process: Any = None  # a stdio server's process (psutil), when it could be told apart

    async def open(self) -> None:
        self.stack = AsyncExitStack()
        before = _child_pids()
        self.client = await _open_client(self.server, self.stderr, self.stack)
        if not self.server.url:
            self.process = _only_new_child(before)
        tools, cursor = [], None
        for _ in range(100):  # pages; a server that paginates forever cannot hang the build
            page = await self.client.list_tools(cursor=cursor)
            tools += [_Tool(t) for t in page.tools]
            cursor = _field(page, "next_cursor", "nextCursor")
            if cursor is None:
                break
        self.tools = tools

    async def close(self) -> None:
        stack, self.stack, self.client = self.stack, None, None
        if stack is not None:
            try:
                await stack.aclose()
            except BaseException as exc:  # noqa: BLE001 — a dead server's transport fails to close; nothing to save
                log.debug("closing MCP session %s: %r", self.server.name, exc)
        self.stderr.close()

    def process_gone(self) -> str | None:
        """Why a stdio server cannot answer any more (its process exited), or None. The SDK notices a
        killed server only when it reads the end of its output; a call sent before that waits for its
        time-out, so the process itself is asked."""
        if self.process is None:
            return None
        import psutil

        try:
            if self.process.status() != psutil.STATUS_ZOMBIE:
                return None
        except psutil.Error:
            pass
        return f"its process ({self.process.pid}) has exited"

    def stderr_tail(self, lines: int = 5) -> str:
        try:
            self.stderr.seek(0)
            tail = [line.rstrip() for line in self.stderr.read().splitlines() if line.strip()][-lines:]
        except (OSError, ValueError):
            return ""
        return (" Server output: " + " | ".join(tail)) if tail else ""


class McpHub:
    """A background event loop holding the process's MCP sessions (see the module docstring)."""

    def __init__(self, linger_s: float = LINGER_S) -> None:
        self.linger_s = linger_s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp-hub", daemon=True)
        self.thread.start()
        self.connections: dict[str, _Connection] = {}
        self.lock = threading.Lock()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run `coroutine` on the hub's loop; TimeoutError (and the coroutine cancelled) past `timeout_s`."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise

    def acquire(self, server: McpServer, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> _Connection:
        with self.lock:
            key = server.connection_key
            connection = self.connections.get(key)
            if connection is not None and connection.dead:
                self.connections.pop(key)
                self.loop.call_soon_threadsafe(_close_soon, connection)
                connection = None
            if connection is None:
                connection = _Connection(server)
                try:
                    self.run(connection.open(), connect_timeout_s)
                except BaseException as exc:  # noqa: BLE001 — any failure to start is the same visible error
                    reason = (
                        f"did not answer in {connect_timeout_s:g} s"
                        if isinstance(exc, TimeoutError)
                        else _reason(exc)
                    )
                    tail = connection.stderr_tail()
                    try:
                        self.run(connection.close(), 10)
                    except TimeoutError:  # the reason above is what the user needs, not the failed clean-up
                        log.warning("MCP server %s: closing the failed session took over 10 s", server.name)
                    raise McpServerError(
                        f"MCP server {server.name!r} ({server.describe()}) could not be reached: {reason}.{tail}"
                    ) from None
                self.connections[key] = connection
            if connection.closer is not None:
                self.loop.call_soon_threadsafe(connection.closer.cancel)
                connection.closer = None
            connection.refs += 1
            return connection

    def release(self, connection: _Connection) -> None:
        with self.lock:
            connection.refs -= 1
            if connection.refs > 0:
                return

            def close_if_unused() -> None:
                with self.lock:
                    if (
                        connection.refs > 0
                        or self.connections.get(connection.server.connection_key) is not connection
                    ):
                        return
                    self.connections.pop(connection.server.connection_key)
                asyncio.ensure_future(connection.close())

            def schedule() -> None:
                connection.closer = self.loop.call_later(self.linger_s, close_if_unused)

            self.loop.call_soon_threadsafe(schedule)

    def close_all(self) -> None:
        with self.lock:
            connections, self.connections = list(self.connections.values()), {}
        for connection in connections:
            try:
                self.run(connection.close(), 10)
            except TimeoutError:
                log.warning("MCP session %s did not close in 10 s", connection.server.name)


_hub: McpHub | None = None
_hub_lock = threading.Lock()


def _close_soon(connection: _Connection) -> None:
    """On the hub's event loop: close a dead connection without waiting for it."""
    asyncio.ensure_future(connection.close())


def hub() -> McpHub:
    global _hub
    with _hub_lock:
        if _hub is not None and not _hub.thread.is_alive():
            # Its loop thread ended (SystemExit or KeyboardInterrupt out of a callback): every call would wait out
            # its time-out, so the next caller gets a fresh loop.
            log.warning("the MCP hub's event loop had stopped; starting a new one")
            _hub = None
        if _hub is None:
            _hub = McpHub()
            # A replaced hub registers again: harmless, close_all closes whichever hub is current.
            atexit.register(close_all)
        return _hub


def close_all() -> None:
    """Close every MCP session of this process now (tests; the end of a run)."""
    if _hub is not None:
        _hub.close_all()


# --- the MCP SDK, 1.x or 2.x ----------------------------------------------------------------------------
# The Python SDK renamed much between its 1.x line (what most servers and `verifiers` use today) and 2.x:
# the high-level `mcp.Client`, snake_case result fields, float time-outs. This adapter speaks both.


def _field(obj: Any, *names: str) -> Any:
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


class _Tool:
    """A listed tool, whichever SDK listed it."""

    def __init__(self, tool: Any) -> None:
        self.name = tool.name
        self.description = tool.description
        self.input_schema = _field(tool, "input_schema", "inputSchema")


class _Session1:
    """mcp 1.x: a ClientSession over the transport's streams."""

    def __init__(self, session: Any) -> None:
        self.session = session

    async def list_tools(self, cursor: str | None = None) -> Any:
        return await self.session.list_tools(cursor=cursor)

    async def call_tool(self, name: str, arguments: dict[str, Any], read_timeout_seconds: float) -> Any:
        return await self.session.call_tool(
            name, arguments, read_timeout_seconds=timedelta(seconds=read_timeout_seconds)
        )


# --- MCP's stateless revision (2026-07-28) over HTTP ----------------------------------------------------
# Each request is one self-contained POST: no initialize handshake, no Mcp-Session-Id; the protocol
# version, client info and capabilities ride in every request's `_meta` and in routing headers
# (MCP-Protocol-Version, Mcp-Method, Mcp-Name) that the server checks against the body. Spoken here with
# the standard library, whichever SDK is installed (mcp 1.x clients only know the handshake).

STATELESS_REVISION = "2026-07-28"
_CLIENT_INFO = {"name": "rollout-studio", "version": "1"}


class StatelessRefused(RuntimeError):
    """The server does not speak the stateless revision (auto then falls back to a session)."""


class _StatelessClient:
    def __init__(self, url: str, timeout_s: float) -> None:
        self.url, self.timeout_s, self._id = url, timeout_s, 0

    def _post(self, method: str, params: dict[str, Any], timeout_s: float, name: str | None = None) -> Any:
        import urllib.error
        import urllib.request

        self._id += 1
        meta = {
            "io.modelcontextprotocol/protocolVersion": STATELESS_REVISION,
            "io.modelcontextprotocol/clientInfo": _CLIENT_INFO,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        body = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": {**params, "_meta": meta}}
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": STATELESS_REVISION,
            "Mcp-Method": method,
        }
        if name is not None:
            headers["Mcp-Name"] = name
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 — http(s) only
                raw, kind = response.read(), response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as refused:
            raw, kind = refused.read(), refused.headers.get("Content-Type", "")
        except TimeoutError:
            raise TimeoutError(f"timed out after {timeout_s:g} s") from None
        text = raw.decode("utf-8", "replace")
        if "text/event-stream" in kind:  # the answer is the stream's last JSON-RPC message
            data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
            text = next((d for d in reversed(data) if d.startswith("{")), "")
        try:
            reply = json.loads(text)
        except ValueError:
            raise StatelessRefused(f"not a JSON-RPC answer: {' '.join(text.split())[:200]}") from None
        if not isinstance(reply, dict) or ("result" not in reply and "error" not in reply):
            raise StatelessRefused("not a JSON-RPC answer")
        if "error" in reply:
            error = reply["error"] or {}
            raise StatelessRefused(f"{error.get('message', 'error')} (code {error.get('code')})")
        return reply["result"]

    async def list_tools(self, cursor: str | None = None) -> Any:
        from types import SimpleNamespace

        params = {"cursor": cursor} if cursor else {}
        result = await asyncio.to_thread(
            self._post, "tools/list", params, max(self.timeout_s, CONNECT_TIMEOUT_S)
        )
        tools = [
            SimpleNamespace(
                name=t.get("name"), description=t.get("description"), inputSchema=t.get("inputSchema")
            )
            for t in result.get("tools") or []
            if isinstance(t, dict) and t.get("name")
        ]
        return SimpleNamespace(tools=tools, nextCursor=result.get("nextCursor"))

    async def call_tool(self, name: str, arguments: dict[str, Any], read_timeout_seconds: float) -> Any:
        from types import SimpleNamespace

        try:
            result = await asyncio.to_thread(
                self._post, "tools/call", {"name": name, "arguments": arguments}, read_timeout_seconds, name
            )
        except StatelessRefused as exc:
            raise RuntimeError(str(exc)) from None  # a protocol error for this call: the model sees it
        content = [
            SimpleNamespace(type=c.get("type", ""), text=c.get("text"), resource=None)
            for c in result.get("content") or []
            if isinstance(c, dict)
        ]
        return SimpleNamespace(
            content=content,
            isError=bool(result.get("isError")),
            structuredContent=result.get("structuredContent"),
        )


async def _open_client(server: McpServer, stderr: Any, stack: AsyncExitStack) -> Any:
    """An initialised client session to `server` whose contexts close with `stack`."""
    if server.url and server.protocol in ("auto", STATELESS_REVISION):
        client = _StatelessClient(server.url, server.timeout_s)
        try:
            await client.list_tools()
            return client
        except StatelessRefused as exc:
            if server.protocol == STATELESS_REVISION:
                raise McpServerError(f"it does not speak MCP {STATELESS_REVISION}: {exc}") from None
            log.info("MCP server %s: no stateless revision (%s); opening a session", server.name, exc)
    import mcp
    from mcp.client.stdio import StdioServerParameters, stdio_client

    transport: Any = None
    if not server.url:
        params = StdioServerParameters(
            command=server.command[0],
            args=list(server.command[1:]),
            env=dict(server.env) or None,
            cwd=server.cwd or None,
        )
        transport = stdio_client(params, errlog=stderr)
    if hasattr(mcp, "Client"):  # 2.x
        return await stack.enter_async_context(
            mcp.Client(server.url if server.url else transport, read_timeout_seconds=server.timeout_s)
        )
    if server.url:
        from mcp.client.streamable_http import streamablehttp_client

        read, write, _session_id = await stack.enter_async_context(
            streamablehttp_client(server.url, timeout=server.timeout_s)
        )
    else:
        read, write = await stack.enter_async_context(transport)
    # The session's own time-out covers the handshake and the listing too (a server may take seconds to
    # start): the per-call limit is passed with each call instead.
    session = await stack.enter_async_context(
        mcp.ClientSession(
            read, write, read_timeout_seconds=timedelta(seconds=max(server.timeout_s, CONNECT_TIMEOUT_S))
        )
    )
    await session.initialize()
    return _Session1(session)


def _child_pids() -> set[int]:
    try:
        import psutil

        return {child.pid for child in psutil.Process().children()}
    except Exception:  # noqa: BLE001 — without psutil a dead server is noticed by the SDK alone
        return set()


def _only_new_child(before: set[int]) -> Any:
    """The process a stdio transport just spawned: the one new child of this process, or None when there
    is not exactly one (another thread started one at the same moment)."""
    try:
        import psutil

        new = [child for child in psutil.Process().children() if child.pid not in before]
    except Exception:  # noqa: BLE001
        return None
    return new[0] if len(new) == 1 else None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in exc.exceptions)
    text = str(exc).strip() or type(exc).__name__
    return text[:500]


def _result_text(result: Any) -> str:
    """A `CallToolResult` as text: its text parts; structured content as JSON when there is no text."""
    parts = []
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind == "resource" and getattr(getattr(item, "resource", None), "text", None) is not None:
            parts.append(item.resource.text)
        else:
            parts.append(f"[{kind or 'content'} omitted]")
    structured = _field(result, "structured_content", "structuredContent")
    if not parts and structured is not None:
        parts.append(json.dumps(structured))
    return "\n".join(parts)


def mcp_toolbox(configs: list[dict[str, Any]] | None) -> McpToolbox | None:
    """The toolbox of an environment's `mcp_servers` (connected now), None when it lists none."""
    return McpToolbox.connect(configs) if configs else None


@dataclass
class McpToolbox:
    """The MCP tools of one environment: specs for the model, calls with the servers' permissions."""

    servers: list[McpServer]
    tools: list[ToolSpec] = field(default_factory=list)
    _connections: dict[str, _Connection] = field(default_factory=dict)  # server name -> session
    _owner: dict[str, McpServer] = field(default_factory=dict)  # tool name -> server
    _calls: dict[str, int] = field(default_factory=dict)  # server name -> calls this episode

    @classmethod
    def connect(
        cls, configs: list[dict[str, Any]], connect_timeout_s: float = CONNECT_TIMEOUT_S
    ) -> McpToolbox:
        servers = [McpServer.from_config(c) for c in configs]
        names = [s.name for s in servers]
        if len(set(names)) != len(names):
            raise ValueError("MCP server names must be unique")
        box = cls(servers)
        try:
            for server in servers:
                connection = hub().acquire(server, connect_timeout_s)
                box._connections[server.name] = connection
                for tool in connection.tools:
                    if not server.allows(tool.name):
                        continue
                    if tool.name in box._owner:
                        raise McpServerError(
                            f"tool {tool.name!r} is offered by MCP servers {box._owner[tool.name].name!r} and "
                            f"{server.name!r}: narrow one server's allow_tools"
                        )
                    box._owner[tool.name] = server
                    box.tools.append(
                        ToolSpec(
                            tool.name,
                            (tool.description or "").strip(),
                            dict(tool.input_schema or {"type": "object"}),
                        )
                    )
                missing = [
                    t
                    for t in server.allow_tools
                    if t != ALL_TOOLS and t not in {x.name for x in connection.tools}
                ]
                if missing:
                    raise McpServerError(
                        f"MCP server {server.name!r} has no tool {', '.join(map(repr, missing))}"
                    )
        except BaseException:
            box.close()
            raise
        return box

    def offers(self, name: str) -> bool:
        return name in self._owner

    def reset(self) -> None:
        self._calls.clear()

    def call(self, call: ToolCall) -> str:
        """Run a permitted, schema-checked call; every refusal or failure is a ToolError."""
        server = self._owner.get(call.name)
        if server is None:
            raise ToolError(f"Tool {call.name!r} is not available.")
        used = self._calls.get(server.name, 0)
        if used >= server.max_calls:
            raise ToolError(f"Tool server {server.name!r} allows {server.max_calls} calls per episode.")
        self._calls[server.name] = used + 1
        connection = self._connections[server.name]
        connection.dead = connection.dead or connection.process_gone()
        if connection.dead:
            raise ToolError(f"Tool server {server.name!r} is not available: {connection.dead}")
        try:
            # The SDK's own timeout first; the outer one guards against a transport that never answers.
            result = hub().run(
                connection.client.call_tool(call.name, call.arguments, read_timeout_seconds=server.timeout_s),
                server.timeout_s + 2.0,
            )
        except Exception as exc:  # noqa: BLE001 — whatever the transport raised, the model sees an error
            reason = _reason(exc)
            if isinstance(exc, TimeoutError) or "timed out" in reason.lower():
                connection.dead = connection.process_gone()  # it died while the call waited
                if connection.dead:
                    raise ToolError(
                        f"Tool server {server.name!r} is not available: {connection.dead}"
                    ) from None
                raise ToolError(f"Tool {call.name!r} timed out after {server.timeout_s:g} s.") from None
            if _is_transport_failure(exc):
                connection.dead = reason
                raise ToolError(f"Tool server {server.name!r} is not available: {reason}") from None
            raise ToolError(f"Tool {call.name!r} failed: {reason}") from None
        text = clip_output(_result_text(result))
        if _field(result, "is_error", "isError"):
            raise ToolError(f"Tool {call.name!r} failed: {text or 'no details'}")
        return text if text else "(no output)"

    def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            hub().release(connection)


def _is_transport_failure(exc: BaseException) -> bool:
    """A closed stream, a refused connection: the server is gone (as opposed to a bad request)."""
    from mcp.shared import exceptions

    sdk_error = _field(exceptions, "MCPError", "McpError")  # 2.x / 1.x
    if sdk_error is not None and isinstance(exc, sdk_error):
        return "closed" in str(exc).lower() or "connection" in str(exc).lower()
    return True


__all__ = ["McpHub", "McpServer", "McpServerError", "McpToolbox", "close_all", "hub"]
