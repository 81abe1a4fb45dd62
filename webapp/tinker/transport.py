"""Between the web app and the worker that holds a training client's model: Redis, the broker we run anyway.

- A run's requests: a list per run (`requests_key`), pushed by the web app before it answers the SDK's
  POST, popped by the worker one at a time. The SDK sends a training client's requests one after another
  (it waits for each POST's future id before sending the next), so arrival order is the client's order
  and the worker applies them in it.
- A request's answer: a key per future (`answer_key`) the worker sets, plus a one-item list the waiting
  `retrieve_future` blocks on (`done_key`), both expiring after `ANSWER_TTL_S`.
- Sessions: who opened them (`session_key`) and whether their client still heartbeats (`beat_key`, which
  expires `TINKER_SESSION_TIMEOUT_S` after the last heartbeat or request).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import redis
from django.conf import settings

ANSWER_TTL_S = 3600
PREFIX = "tinker"


def requests_key(run_id: int) -> str:
    return f"{PREFIX}:run:{run_id}:requests"


def answer_key(request_id: str) -> str:
    return f"{PREFIX}:future:{request_id}"


def done_key(request_id: str) -> str:
    return f"{PREFIX}:future:{request_id}:done"


def request_run_key(request_id: str) -> str:
    return f"{PREFIX}:future:{request_id}:run"


def session_key(session_id: str) -> str:
    return f"{PREFIX}:session:{session_id}"


def beat_key(session_id: str) -> str:
    return f"{PREFIX}:session:{session_id}:beat"


def model_info_key(run_id: int) -> str:
    return f"{PREFIX}:run:{run_id}:info"


def sampler_key(sampling_session_id: str) -> str:
    return f"{PREFIX}:sampler:{sampling_session_id}"


_clients: dict[str, redis.Redis] = {}


def client() -> redis.Redis:
    """One client (and connection pool) per process and URL: every request of the SDK and every answer
    of the worker touches Redis, and a client made per call opened a connection per call."""
    url = settings.REDIS_URL
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=5)
    return _clients[url]


def async_client() -> Any:
    import redis.asyncio

    return redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_timeout=30, socket_connect_timeout=5)


def new_request_id() -> str:
    return uuid.uuid4().hex


def put_request(run_id: int, kind: str, body: dict[str, Any], request_id: str | None = None) -> str:
    """Queue a request for the run's worker; its future id (what the SDK polls)."""
    request_id = request_id or new_request_id()
    conn = client()
    with conn.pipeline() as pipe:
        pipe.set(request_run_key(request_id), run_id, ex=ANSWER_TTL_S)
        pipe.rpush(requests_key(run_id), json.dumps({"request_id": request_id, "kind": kind, "body": body}))
        pipe.execute()
    return request_id


def put_answer(request_id: str, answer: dict[str, Any]) -> None:
    conn = client()
    with conn.pipeline() as pipe:
        pipe.set(answer_key(request_id), json.dumps(answer), ex=ANSWER_TTL_S)
        pipe.rpush(done_key(request_id), "1")
        pipe.expire(done_key(request_id), ANSWER_TTL_S)
        pipe.execute()


def answered(request_id: str, answer: dict[str, Any]) -> str:
    """A future that is already answered (a request refused before any worker saw it)."""
    put_answer(request_id, answer)
    return request_id


def take_request(run_id: int, timeout_s: float, conn: redis.Redis | None = None) -> dict[str, Any] | None:
    item = (conn or client()).blpop([requests_key(run_id)], timeout=timeout_s)
    return json.loads(item[1]) if item else None


def pending_requests(run_id: int) -> list[dict[str, Any]]:
    """Take every request still queued for the run (its end answers them)."""
    conn = client()
    with conn.pipeline() as pipe:
        pipe.lrange(requests_key(run_id), 0, -1)
        pipe.delete(requests_key(run_id))
        items, _ = pipe.execute()
    return [json.loads(i) for i in items]


async def wait_answer(request_id: str, timeout_s: float) -> dict[str, Any] | None:
    """The future's answer, waiting up to `timeout_s` for the worker to give it; None if not yet."""
    conn = async_client()
    try:
        raw = await conn.get(answer_key(request_id))
        if raw is None and await conn.blpop([done_key(request_id)], timeout=timeout_s):
            await conn.rpush(done_key(request_id), "1")  # for a retry of the same poll
            raw = await conn.get(answer_key(request_id))
        return json.loads(raw) if raw is not None else None
    finally:
        await conn.aclose()


def run_of_request(request_id: str) -> int | None:
    raw = client().get(request_run_key(request_id))
    return int(raw) if raw else None


def put_json(key: str, value: Any, ttl_s: int = 7 * 86400) -> None:
    client().set(key, json.dumps(value), ex=ttl_s)


def get_json(key: str) -> Any:
    raw = client().get(key)
    return json.loads(raw) if raw is not None else None


def beat(session_id: str) -> None:
    client().set(beat_key(session_id), "1", ex=settings.TINKER_SESSION_TIMEOUT_S)


def session_alive(session_id: str) -> bool:
    return bool(client().exists(beat_key(session_id)))


def end_session(session_id: str) -> None:
    client().delete(beat_key(session_id))
