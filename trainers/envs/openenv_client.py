"""The OpenEnv wire client: one episode's calls to a server, over its /ws session or stateless HTTP
(`POST /reset`, `POST /step`, `GET /state`, `GET /schema`, `GET /health`; MCP tools through /ws). Every
call has a timeout; a dead or failing server raises `RemoteEnvironmentError` naming it and the reason.
The `openenv` kind's adapter (`trainers.envs.openenv`) maps turns onto these calls."""

from __future__ import annotations

import json
import re
from typing import Any

import requests


class RemoteEnvironmentError(RuntimeError):
    """The environment server could not be reached or answered with an error; the message says which and why."""


# The routes an OpenEnv 0.10 server in production mode leaves out (its /ws session still plays episodes).
SIMULATION_ROUTES = ("/reset", "/step", "/state")


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) < 300 else text[:300] + "…"


class OpenEnvClient:
    """A synchronous client for one episode: a /ws session, or stateless HTTP calls.

    Every call has a timeout; failures raise RemoteEnvironmentError naming the server and the reason.
    """

    def __init__(self, url: str, *, transport: str, connect_timeout_s: float, step_timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self.transport = transport
        self.connect_timeout_s, self.step_timeout_s = connect_timeout_s, step_timeout_s
        self.http = requests.Session()
        self.ws: Any = None
        self.mode = "http" if transport == "http" else "ws"

    # -- plumbing

    def _http(
        self, method: str, path: str, payload: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Any:
        try:
            response = self.http.request(
                method,
                self.url + path,
                json=payload,
                timeout=(self.connect_timeout_s, timeout or self.step_timeout_s),
            )
        except requests.Timeout as exc:
            raise RemoteEnvironmentError(
                f"OpenEnv server {self.url} did not answer {method} {path} in time: {_describe(exc)}"
            ) from exc
        except requests.RequestException as exc:
            raise RemoteEnvironmentError(
                f"OpenEnv server {self.url} is unreachable ({method} {path}): {_describe(exc)}"
            ) from exc
        if response.status_code == 404 and path in SIMULATION_ROUTES:
            raise RemoteEnvironmentError(
                f"OpenEnv server {self.url} has no HTTP {path}: an OpenEnv 0.10 server in production mode "
                "plays episodes over its /ws session only (and its tools at /mcp) — set the environment's "
                "transport to ws."
            )
        if response.status_code >= 400:
            raise RemoteEnvironmentError(
                f"OpenEnv server {self.url} answered {method} {path} with HTTP {response.status_code}: {response.text[:500]}"
            )
        try:
            return response.json()
        except ValueError as exc:
            raise RemoteEnvironmentError(
                f"OpenEnv server {self.url} sent non-JSON for {method} {path}."
            ) from exc

    def _ws_url(self) -> str:
        return re.sub(r"^http", "ws", self.url) + "/ws"

    def _open_ws(self) -> bool:
        """Open a /ws session; False (auto transport only) when the server has no /ws."""
        from websockets.exceptions import InvalidStatus
        from websockets.sync.client import connect

        try:
            self.ws = connect(
                self._ws_url(),
                open_timeout=self.connect_timeout_s,
                close_timeout=1.0,
                max_size=2**24,
                proxy=None,
            )
            return True
        except InvalidStatus as exc:  # an HTTP answer without the upgrade: no /ws here
            if self.transport == "auto":
                return False
            raise RemoteEnvironmentError(
                f"OpenEnv server {self.url} has no /ws session endpoint: {_describe(exc)}"
            ) from exc
        except (OSError, TimeoutError) as exc:
            raise RemoteEnvironmentError(
                f"OpenEnv server {self.url} is unreachable (/ws): {_describe(exc)}"
            ) from exc

    def _ws_call(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            self.ws.send(json.dumps(message))
            raw = self.ws.recv(timeout=self.step_timeout_s)
        except TimeoutError as exc:
            self.close()
            raise RemoteEnvironmentError(
                f"OpenEnv server {self.url} did not answer a {message['type']} message within {self.step_timeout_s:g} s."
            ) from exc
        except Exception as exc:  # noqa: BLE001 — ConnectionClosed and socket errors alike: the session is gone
            self.close()
            raise RemoteEnvironmentError(
                f"OpenEnv session with {self.url} broke during {message['type']}: {_describe(exc)}"
            ) from exc
        try:
            reply = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RemoteEnvironmentError(
                f"OpenEnv server {self.url} sent non-JSON on /ws: {raw[:200]!r}"
            ) from exc
        if reply.get("type") == "error":
            data = reply.get("data") or {}
            hint = ""
            if data.get("code") == "CAPACITY_REACHED":
                hint = (
                    f" The server allows {data.get('max_sessions')} concurrent sessions; a training step opens "
                    "group_size × prompts_per_step of them: raise the server's max_concurrent_envs."
                )
            raise RemoteEnvironmentError(
                f"OpenEnv server {self.url}: {data.get('message', 'error')} ({data.get('code')}).{hint}"
            )
        return reply.get("data") or {}

    # -- the protocol

    def reset(self, **kwargs: Any) -> dict[str, Any]:
        if self.mode == "ws":
            self.close()
            if self._open_ws():
                return self._ws_call({"type": "reset", "data": kwargs})
            self.mode = "http"
        return self._http("POST", "/reset", kwargs)

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        if self.mode == "ws":
            if self.ws is None:
                raise RemoteEnvironmentError(f"The OpenEnv session with {self.url} is closed.")
            return self._ws_call({"type": "step", "data": action})
        return self._http("POST", "/step", {"action": action, "timeout_s": self.step_timeout_s})

    def state(self) -> dict[str, Any]:
        if self.mode == "ws" and self.ws is not None:
            return self._ws_call({"type": "state"})
        return self._http("GET", "/state")

    def list_tools(self) -> list[dict[str, Any]]:
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        if self.mode == "ws" and self.ws is not None:
            reply = self._ws_call({"type": "mcp", "data": request})
        else:
            reply = self._http("POST", "/mcp", request)
        if reply.get("error"):
            raise RemoteEnvironmentError(
                f"OpenEnv server {self.url} could not list its MCP tools: {reply['error']}"
            )
        return list((reply.get("result") or {}).get("tools") or [])

    def schema(self) -> dict[str, Any]:
        return self._http("GET", "/schema", timeout=self.connect_timeout_s)

    def health(self) -> dict[str, Any]:
        return self._http("GET", "/health", timeout=self.connect_timeout_s)

    def close(self) -> None:
        ws, self.ws = self.ws, None
        if ws is not None:
            try:
                ws.send(json.dumps({"type": "close"}))
            except Exception:  # noqa: BLE001,S110 — best effort: the server also ends the session when the socket closes
                pass
            try:
                ws.close()
            except Exception:  # noqa: BLE001,S110 — the socket may already be gone
                pass


def close_client(client: OpenEnvClient) -> None:
    """End the client's session and release its HTTP connections."""
    client.close()
    client.http.close()
