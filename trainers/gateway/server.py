"""The agent gateway: an OpenAI-compatible HTTP server in front of the run's generation backend.

The user's agent talks to it like to any OpenAI endpoint (`POST /v1/chat/completions`, `GET /v1/models`);
every call of a session is recorded as exact tokens (`trainers.gateway.sessions`), sampled from the
policy the trainer holds right now. The session API groups calls into episodes:

    POST /v1/sessions                 {"task": {...}}            → 201 {"session_id", "base_url", ...}
    POST /s/<id>/v1/chat/completions  (or /v1/chat/completions with header X-Session-Id: <id>)
    POST /v1/sessions/<id>/reward     {"reward": 1.0, "info"?: {...}}
    POST /v1/sessions/<id>/end        {"status"?: "ok"|"truncated"|"error", "error"?: "..."}
    GET  /v1/sessions/<id>

The server is the standard library's threading HTTP server on 127.0.0.1 (one thread per connection;
nothing to install); the sampling happens on one generation thread that batches concurrent calls
(`trainers.gateway.batching`). It listens on loopback only and checks no API key: it is a local
endpoint for the agents the trainer itself starts.
"""

from __future__ import annotations

import json
import logging
import math
import re
import secrets
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trainers.gateway.batching import Batcher, GatewayClosed, Job
from trainers.gateway.protocol import (
    ApiError,
    ChatRequest,
    Reply,
    bad_request,
    completion_chunks,
    completion_json,
    parse_chat_request,
)
from trainers.gateway.sessions import OUTCOMES, Session, session_finished, session_not_found
from trainers.rollout.chat import ChatFormat
from trainers.types import Task

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024
REMEMBERED_FINISHED = 100_000  # ids of released sessions still answered with 409, not 404
_SESSION_PATH = re.compile(r"^/s/(?P<sid>[A-Za-z0-9_-]{1,64})(?P<rest>/.*)$")
_SESSION_API = re.compile(r"^/v1/sessions/(?P<sid>[A-Za-z0-9_-]{1,64})(?P<action>/reward|/end)?$")


@dataclass
class Response:
    status: int
    body: Any = None  # JSON-able
    chunks: Iterator[dict[str, Any]] | None = None  # a server-sent-events stream instead of a body
    headers: dict[str, str] = field(default_factory=dict)


class Gateway:
    """Serves `backend` (the run's generation backend) to agents and records their episodes.

    `max_new_tokens` / `max_context_tokens` / `max_turns` bound every session like an environment's
    episode; `tool_stop` are the stop strings added to a call that offers tools (the run's tool
    format's, so a call ends where an environment's turn would). `max_staleness`: a session opened
    more than this many policy versions ago gets 429 (`set_policy_version` moves the version);
    `max_open_sessions`: opening one more gets 429. `require_session`: refuse calls outside a session
    (a training run records every call); off, such calls are served and not recorded. `api_key`: when set,
    every route but /health needs `Authorization: Bearer <api_key>` (401 otherwise) — for a gateway served
    as an endpoint beyond the trainer's own agents, e.g. a judge.
    """

    def __init__(
        self,
        backend: Any,
        chat: ChatFormat,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model_name: str = "policy",
        max_new_tokens: int = 128,
        max_context_tokens: int = 2048,
        max_turns: int = 0,
        tool_stop: tuple[str, ...] | None = None,
        policy_version: int = 0,
        max_staleness: int | None = None,
        max_open_sessions: int | None = None,
        require_session: bool = True,
        batch_window_s: float = 0.02,
        seed: int | None = None,
        request_timeout_s: float = 600.0,
        api_key: str | None = None,
    ) -> None:
        self.backend, self.chat, self.fmt = backend, chat, chat.tool_format
        self.host, self.port = host, port
        self.model_name = model_name
        self.max_new_tokens, self.max_context_tokens, self.max_turns = (
            max_new_tokens,
            max_context_tokens,
            max_turns,
        )
        self.tool_stop = tuple(tool_stop if tool_stop is not None else self.fmt.stop)
        self.policy_version = policy_version
        self.max_staleness, self.max_open_sessions = max_staleness, max_open_sessions
        self.require_session = require_session
        self.request_timeout_s = request_timeout_s
        self.api_key = api_key
        self.sessions: dict[str, Session] = {}
        self._released: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._render_lock = threading.Lock()  # chat-template rendering and tokenizing, one at a time
        self._loose_calls = 0  # calls outside a session being served (they may join a batch too)
        self.calls = 0
        self.call_seconds = 0.0  # wall time of calls from arrival to reply
        self.batcher = Batcher(backend, waiting_for=self._could_join, window_s=batch_window_s, seed=seed)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifetime ------------------------------------------------------------------------------------

    def start(self) -> Gateway:
        self._server = _Server((self.host, self.port), _Handler, self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"gateway-{self.port}",
            daemon=True,
        )
        self._thread.start()
        log.info("agent gateway listening on %s", self.url)
        return self

    def close(self) -> None:
        """Stop serving: open sessions end, waiting calls get 503, the port is released."""
        with self._lock:
            open_sessions = [s for s in self.sessions.values() if s.open]
        for session in open_sessions:
            if session.outcome is None:
                session.finish("error", "the gateway shut down while the session was open")
            else:
                session.finish()  # already cut short by a limit: it stays truncated
        self.batcher.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.close_connections()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def session_url(self, session_id: str) -> str:
        """The OpenAI base URL an agent of this session uses (`OpenAI(base_url=…)`)."""
        return f"{self.url}/s/{session_id}/v1"

    def set_policy_version(self, version: int) -> None:
        self.policy_version = version

    # -- the session API (Python; the HTTP routes call these) -----------------------------------------

    def open_session(
        self,
        task: Task | dict[str, Any],
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        max_turns: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        """A new episode for `task`. `temperature` / `top_p` fixed here win over the agent's (a
        training run samples at its own temperature: the learner's ratio assumes it)."""
        task = task if isinstance(task, Task) else _task(task)
        with self._lock:
            open_count = sum(1 for s in self.sessions.values() if s.open)
            if self.max_open_sessions is not None and open_count >= self.max_open_sessions:
                raise ApiError(
                    429,
                    f"{open_count} sessions are open (the limit is {self.max_open_sessions}); "
                    "retry when one has ended.",
                    code="too_many_sessions",
                    type_="rate_limit_error",
                    headers={"Retry-After": "1"},
                )
            session_id = f"sess_{secrets.token_hex(12)}"
            session = Session(
                session_id,
                task,
                policy_version=self.policy_version,
                max_turns=self.max_turns if max_turns is None else max_turns,
                temperature=temperature,
                top_p=top_p,
                metadata=metadata,
            )
            self.sessions[session_id] = session
        return session

    def session(self, session_id: str) -> Session:
        with self._lock:
            session = self.sessions.get(session_id)
            if session is None:
                raise (
                    session_finished(session_id)
                    if session_id in self._released
                    else session_not_found(session_id)
                )
            return session

    def end_session(self, session_id: str, outcome: str | None = None, error: str | None = None) -> Session:
        if outcome is not None and outcome not in OUTCOMES:
            raise bad_request(f"status must be one of {', '.join(OUTCOMES)}.", param="status")
        session = self.session(session_id)
        if not session.finish(outcome, error):
            raise session_finished(session_id)
        self.batcher.poke()
        return session

    def release(self, session_id: str) -> None:
        """Forget an ended session's record (its id still gets 409, not 404)."""
        with self._lock:
            self.sessions.pop(session_id, None)
            self._released[session_id] = None
            while len(self._released) > REMEMBERED_FINISHED:
                self._released.popitem(last=False)

    def _could_join(self) -> int:
        with self._lock:
            return sum(1 for s in self.sessions.values() if s.open) + self._loose_calls

    # -- chat completions ---------------------------------------------------------------------------

    def complete(self, body: Any, session_id: str | None) -> tuple[ChatRequest, Reply]:
        """Serve one chat-completions request body (raises ApiError)."""
        started = time.perf_counter()
        request = parse_chat_request(body)
        if session_id is None:
            if self.require_session:
                raise bad_request(
                    "Calls must belong to a session: use the base_url returned by POST /v1/sessions "
                    "(or send the header X-Session-Id).",
                    code="session_required",
                )
            session = Session("loose", _task({"prompt": ""}), policy_version=self.policy_version, max_turns=0)
            with self._lock:
                self._loose_calls += 1
            try:
                reply = self._call(session, request)
            finally:
                with self._lock:
                    self._loose_calls -= 1
        else:
            session = self.session(session_id)
            with session.call_lock:
                reply = self._call(session, request)
        with self._lock:
            self.calls += 1
            self.call_seconds += time.perf_counter() - started
        return request, reply

    def _call(self, session: Session, request: ChatRequest) -> Reply:
        if not session.open:
            raise session_finished(session.id)
        behind = self.policy_version - session.policy_version
        if self.max_staleness is not None and behind > self.max_staleness:
            session.finish(
                "error",
                f"the policy moved {behind} versions past this session (max_staleness={self.max_staleness})",
            )
            self.batcher.poke()
            raise ApiError(
                429,
                f"Session {session.id!r} is {behind} policy versions old (the bound is "
                f"{self.max_staleness}); start a new session.",
                code="stale_session",
                type_="rate_limit_error",
            )
        if session.max_turns and session.calls >= session.max_turns:
            session.truncate(f"max_turns={session.max_turns}")
            raise bad_request(
                f"This episode has used its {session.max_turns} model calls.", code="max_turns_exceeded"
            )
        with self._render_lock:
            plan = session.plan(request, self.chat, self.fmt)
        room = self.max_context_tokens - len(plan.context)
        if room < 1:
            session.truncate(f"max_context_tokens={self.max_context_tokens}")
            raise bad_request(
                f"The conversation has {len(plan.context)} tokens; the context holds "
                f"{self.max_context_tokens}.",
                param="messages",
                code="context_length_exceeded",
            )
        stops = list(dict.fromkeys([*request.stop, *(self.tool_stop if request.tools else ())]))
        job = Job(
            plan.context,
            min(request.max_tokens or self.max_new_tokens, self.max_new_tokens, room),
            _first(session.temperature, request.temperature, 1.0),
            _first(session.top_p, request.top_p, 1.0),
            tuple(stops),
        )
        try:
            completion = self.batcher.submit(job).result(timeout=self.request_timeout_s)
        except GatewayClosed as exc:
            raise ApiError(503, str(exc), code="gateway_closed", type_="server_error") from None
        except FutureTimeout:
            raise ApiError(
                504, f"No sample within {self.request_timeout_s:g} s.", code="timeout", type_="server_error"
            ) from None
        except Exception as exc:  # noqa: BLE001 — the backend failed this batch: a 500 the agent sees
            raise ApiError(
                500, f"Generation failed: {exc}", code="generation_failed", type_="server_error"
            ) from None
        with self._render_lock:
            reply = session.record(plan, request, completion, self.chat, self.fmt)
            if request.logprobs:
                reply.tokens = [self.chat.tokenizer.decode([t]) for t in reply.completion_ids]
        return reply

    # -- HTTP routing -------------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Response:
        """One HTTP request → one response (errors in OpenAI's shape)."""
        try:
            return self._route(method, path.split("?", 1)[0], headers, raw)
        except ApiError as exc:
            return Response(exc.status, exc.body(), headers=exc.headers)
        except Exception as exc:  # noqa: BLE001 — a bug must answer 500, not drop the connection
            log.exception("gateway error on %s %s", method, path)
            return Response(
                500,
                ApiError(500, f"Internal error: {exc}", code="internal_error", type_="server_error").body(),
            )

    def _route(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Response:
        session_id = headers.get("x-session-id") or None
        scoped = _SESSION_PATH.match(path)
        if scoped:
            session_id, path = scoped["sid"], scoped["rest"]
            self.session(session_id)  # 404 / 409 for a URL of an unknown or released session
        if path == "/health":
            _allow(method, "GET")
            return Response(200, {"status": "ok", "policy_version": self.policy_version})
        if self.api_key is not None and not secrets.compare_digest(
            headers.get("authorization", ""), f"Bearer {self.api_key}"
        ):
            raise ApiError(
                401, "Incorrect API key provided.", code="invalid_api_key", type_="invalid_request_error"
            )
        if path == "/v1/models":
            _allow(method, "GET")
            return Response(200, {"object": "list", "data": [self._model_card()]})
        if path == f"/v1/models/{self.model_name}":
            _allow(method, "GET")
            return Response(200, self._model_card())
        if path == "/v1/chat/completions":
            _allow(method, "POST")
            request, reply = self.complete(_json(raw), session_id)
            if request.stream:
                return Response(200, chunks=completion_chunks(reply, request, self.model_name))
            return Response(200, completion_json(reply, request, self.model_name))
        if path == "/v1/sessions":
            _allow(method, "POST")
            body = _json(raw) if raw.strip() else {}
            if not isinstance(body, dict):
                raise bad_request("The request body must be a JSON object.")
            task = body.get("task", {})
            if not isinstance(task, dict):
                raise bad_request("task must be a JSON object.", param="task")
            session = self.open_session(
                task, metadata=body.get("metadata") if isinstance(body.get("metadata"), dict) else None
            )
            return Response(201, {**session.summary(), "base_url": self.session_url(session.id)})
        match = _SESSION_API.match(path)
        if match:
            sid, action = match["sid"], match["action"]
            if action is None:
                _allow(method, "GET")
                return Response(200, {**self.session(sid).summary(), "base_url": self.session_url(sid)})
            _allow(method, "POST")
            body = _json(raw) if raw.strip() else {}
            if not isinstance(body, dict):
                raise bad_request("The request body must be a JSON object.")
            if action == "/reward":
                reward = body.get("reward")
                if reward is not None and (
                    isinstance(reward, bool)
                    or not isinstance(reward, (int, float))
                    or not math.isfinite(reward)
                ):
                    raise bad_request("reward must be a finite number.", param="reward")
                info = body.get("info") or {}
                if not isinstance(info, dict):
                    raise bad_request("info must be a JSON object.", param="info")
                if reward is None and not info:
                    raise bad_request("Send a reward, info or both.", param="reward")
                session = self.session(sid)
                if not session.open:
                    raise session_finished(sid)
                session.set_reward(reward, info)
                return Response(200, session.summary())
            error = body.get("error")
            if error is not None and not isinstance(error, str):
                raise bad_request("error must be a string.", param="error")
            return Response(200, self.end_session(sid, body.get("status"), error).summary())
        raise ApiError(404, f"No route {method} {path}.", code="not_found", type_="not_found_error")

    def _model_card(self) -> dict[str, Any]:
        return {
            "id": self.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "rollout-studio",
            "policy_version": self.policy_version,
        }


def _first(*values: float | None) -> float:
    return next(float(v) for v in values if v is not None)


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise ApiError(405, f"Use {allowed} here.", code="method_not_allowed")


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"The body is not JSON: {exc}", code="malformed_json") from None


def _task(data: dict[str, Any]) -> Task:
    prompt = data.get("prompt", "")
    if not isinstance(prompt, str):
        raise bad_request("task.prompt must be a string.", param="task.prompt")
    known = {"id", "prompt", "answer", "meta"}
    meta = dict(data.get("meta") or {}) if isinstance(data.get("meta"), dict) else {}
    meta.update({k: v for k, v in data.items() if k not in known})
    return Task(
        id=str(data.get("id") or f"task-{secrets.token_hex(4)}"),
        prompt=prompt,
        answer=data.get("answer"),
        meta=meta,
    )


# ---- the HTTP server ---------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type, gateway: Gateway) -> None:
        self.gateway = gateway
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Close kept-alive connections, so no handler thread waits on a client after the close."""
        with self._connections_lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: an agent's client reuses its connection
    server_version = "RolloutStudioGateway/1"
    timeout = 120  # an idle kept-alive connection is closed after this many seconds
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — the base class's name
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:  # noqa: N802 — http.server's naming
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._send(
                Response(
                    413,
                    ApiError(
                        413, f"The body is over {MAX_BODY_BYTES} bytes.", code="request_too_large"
                    ).body(),
                )
            )
            self.close_connection = True
            return
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        self._send(self.server.gateway.handle(method, self.path, headers, raw))

    def _send(self, response: Response) -> None:
        try:
            if response.chunks is not None:
                self.send_response(response.status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in response.chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True
                return
            payload = json.dumps(response.body).encode()
            self.send_response(response.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for key, value in response.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the agent went away (killed on time-out): nothing to answer
