"""Report any trainer to Rollout Studio: a few calls, never blocking the training loop.

    from trainers.sdk import Studio

    studio = Studio("http://studio:8000", api_token="rsu_…")   # or $ROLLOUT_STUDIO_URL, $ROLLOUT_STUDIO_API_TOKEN
    with studio.start_run(project="agents", name="grpo-qwen", config={"lr": 1e-6}) as run:
        for step in range(steps):
            ...
            run.log_metrics(step, {"reward/mean": 0.41, "kl": 0.002})
            run.log_trajectories(step, [{"prompt": p, "completion": c, "reward": r} for p, c, r in batch])
            if run.should_cancel():         # someone pressed Cancel in the dashboard
                break
    # leaving the block reports SUCCEEDED (CANCELLED after a cancel, FAILED with the traceback on an exception)

Every `log_*` call only checks and queues the event; a background thread (`trainers.reporting.HttpSink`)
batches, retries and heartbeats. `log_*` never raises for bad data: a piece the dashboard would refuse
(a NaN reward, a 300-character metric name) is dropped with a warning and counted in `run.stats`, so a
telemetry bug cannot stop a long training run — and cannot poison a batch of good events either.

No Django and no third-party trainer library is imported here; `trainers.integrations.trl` holds the
TRL callback and imports transformers lazily.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import math
import os
import threading
import traceback as traceback_module
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import asdict, is_dataclass
from types import TracebackType
from typing import Any

import requests

from trainers.reporting import HttpSink

log = logging.getLogger(__name__)

# The ingestion API's limits (webapp/rollouts/ingest.py; docs/api.md "Run event ingestion").
ROLES = ("system", "user", "assistant", "tool")
SPLITS = ("train", "eval")
TRAJECTORY_STATUSES = ("ok", "truncated", "error")
FINAL_STATUSES = ("SUCCEEDED", "FAILED", "CANCELLED")
MAX_METRIC_NAME = 100
MAX_TASK_ID = 200
MAX_TEXT = 200_000
MAX_LOG_MESSAGE = 20_000
MAX_TURNS = 2000
MAX_CHECKPOINT_PATH = 500
# Split trajectory events well below the server's per-event and per-batch limits.
MAX_ITEMS_PER_EVENT = 500
MAX_EVENT_BYTES = 2 * 1024 * 1024


class StudioError(RuntimeError):
    """The dashboard refused or could not be reached for a call that must answer (creating a run)."""


def _number(value: Any) -> float | None:
    """A finite float from int/float/numpy/torch scalars; None for anything else or NaN/inf."""
    if isinstance(value, bool):
        return float(value)
    if hasattr(value, "item") and not isinstance(value, (int, float)):
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):  # a tensor with more than one element
            return None
    if isinstance(value, (int, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    return None


def _integer(value: Any) -> int | None:
    if hasattr(value, "item") and not isinstance(value, (int, float)):
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):
            return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def jsonable(value: Any) -> Any:
    """Plain JSON from configs and trainer objects: dataclasses, enums, numpy/torch scalars, paths."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return jsonable(asdict(value))
    if hasattr(value, "to_dict"):
        try:
            return jsonable(value.to_dict())
        except TypeError:
            pass
    if hasattr(value, "item"):
        try:
            return jsonable(value.item())
        except (TypeError, ValueError, RuntimeError):
            pass
    if hasattr(value, "value") and type(value).__module__ != "builtins":  # enums
        return jsonable(value.value)
    return str(value)


def _text(value: Any) -> str:
    """Message content as text: a string, or OpenAI-style content parts joined."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, Mapping):
                if part.get("type", "text") == "text":
                    parts.append(str(part.get("text", "")))
                else:
                    parts.append(f"[{part.get('type')}]")
            else:
                parts.append(str(part))
        return "".join(parts)
    return str(value)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 20] + "\n…[truncated]"


_ROLE_ALIASES = {"developer": "system", "function": "tool", "ipython": "tool", "human": "user", "gpt": "assistant",
                 "model": "assistant", "bot": "assistant"}


def messages_to_turns(messages: Any, default_role: str = "assistant") -> list[dict[str, Any]]:
    """Chat messages (a string, or [{"role", "content", "tool_calls"?}] as in OpenAI / TRL) → turns."""
    if messages is None:
        return []
    if isinstance(messages, str):
        return [{"role": default_role, "text": _clip(messages, MAX_TEXT)}]
    if isinstance(messages, Mapping):
        messages = [messages]
    turns: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, Mapping):
            turns.append({"role": default_role, "text": _clip(_text(message), MAX_TEXT)})
            continue
        role = str(message.get("role") or default_role).lower()
        role = role if role in ROLES else _ROLE_ALIASES.get(role, "user")
        turn: dict[str, Any] = {"role": role, "text": _clip(_text(message.get("content", message.get("text"))), MAX_TEXT)}
        calls = message.get("tool_calls") or []
        if role == "assistant" and calls:
            function = calls[0].get("function", calls[0]) if isinstance(calls[0], Mapping) else {}
            turn["tool_name"] = str(function.get("name") or "")[:100] or None
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    arguments = {"raw": arguments}
            if isinstance(arguments, Mapping):
                turn["tool_args"] = jsonable(arguments)
        if role == "tool":
            turn["tool_result"] = turn["text"]
            if message.get("name"):
                turn["tool_name"] = str(message["name"])[:100]
        turns.append({k: v for k, v in turn.items() if v is not None})
    return turns


def _turn(source: Any) -> dict[str, Any]:
    """A turn in the wire format from a wire-format dict, a chat message or a `trainers.types.Turn`."""
    if hasattr(source, "to_dict"):
        source = source.to_dict()
    if not isinstance(source, Mapping):
        return {"role": "assistant", "text": _clip(_text(source), MAX_TEXT)}
    if "text" not in source and ("content" in source or "tool_calls" in source):
        turn = messages_to_turns([source])[0]
    else:
        role = str(source.get("role") or "assistant").lower()
        turn = {"role": role if role in ROLES else _ROLE_ALIASES.get(role, "user"),
                "text": _clip(_text(source.get("text")), MAX_TEXT)}
    if isinstance(source.get("tool_name"), str) and source["tool_name"]:
        turn["tool_name"] = source["tool_name"][:100]
    if isinstance(source.get("tool_args"), Mapping):
        turn["tool_args"] = jsonable(source["tool_args"])
    if isinstance(source.get("tool_result"), str):
        turn["tool_result"] = _clip(source["tool_result"], MAX_TEXT)
    reward = _number(source.get("reward"))
    if reward is not None:
        turn["reward"] = reward
    for key in ("token_ids", "loss_mask"):
        values = source.get(key)
        if isinstance(values, (list, tuple)):
            ints = [_integer(v) for v in values]
            if all(v is not None for v in ints):
                turn[key] = ints
    return turn


def prompt_task_id(prompt: str) -> str:
    """A stable id for a prompt, so the same task is followed across steps (and across runs)."""
    return "prompt-" + hashlib.sha1(prompt.encode("utf-8", "replace")).hexdigest()[:16]


def _components(value: Any) -> list[dict[str, Any]] | None:
    """[{"name", "raw", "weight", "weighted"}] from that list, or from the shorthand {name: raw}."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        out = []
        for name, raw in value.items():
            number = _number(raw)
            if number is not None:
                out.append({"name": str(name)[:200], "raw": number, "weight": 1.0, "weighted": number})
        return out
    if not isinstance(value, list):
        return None
    out = []
    for component in value:
        if not isinstance(component, Mapping) or not component.get("name"):
            return None
        raw, weight = _number(component.get("raw")), _number(component.get("weight", 1.0))
        weighted = _number(component.get("weighted")) if component.get("weighted") is not None else None
        if raw is None or weight is None:
            continue  # a criterion that did not apply (NaN): leave it out rather than lose the trajectory
        entry = {"name": str(component["name"])[:200], "raw": raw, "weight": weight,
                 "weighted": weighted if weighted is not None else raw * weight}
        for key in ("kind", "explanation"):
            if isinstance(component.get(key), str):
                entry[key] = _clip(component[key], MAX_TEXT)
        out.append(entry)
    return out


def trajectory_item(obj: Any) -> dict[str, Any]:
    """One trajectory in the wire format from what a trainer has at hand.

    Accepts a wire-format dict (with "turns"), a dict with "prompt" + "completion" (strings or chat
    messages) or "messages", a `trainers.types.Trajectory` (reward from `info["reward"]`, else its
    env_reward), or anything with `to_item()`. "group" / "sample" may be left out (see
    `Run.log_trajectories`). Raises ValueError when no reward can be found.
    """
    if hasattr(obj, "to_item"):
        obj = obj.to_item()
    elif hasattr(obj, "task") and hasattr(obj, "turns") and not isinstance(obj, Mapping):
        info = dict(getattr(obj, "info", {}) or {})
        obj = {
            "task_id": obj.task.id,
            "prompt": obj.task.prompt,
            "turns": [t.to_dict() if hasattr(t, "to_dict") else t for t in obj.turns],
            "status": obj.status,
            "reward": info.pop("reward", getattr(obj, "env_reward", None)),
            **{k: v for k, v in info.items() if k in ("group", "sample", "advantage", "components", "seed", "split")},
        }
    if not isinstance(obj, Mapping):
        raise ValueError(f"a trajectory must be a dict or a Trajectory, not {type(obj).__name__}")
    item: dict[str, Any] = {}
    prompt = obj.get("prompt")
    if isinstance(obj.get("turns"), list):
        turns = [_turn(t) for t in obj["turns"]]
    elif obj.get("messages") is not None:
        turns = messages_to_turns(obj["messages"], default_role="user")
    else:
        turns = messages_to_turns(prompt, default_role="user") + messages_to_turns(obj.get("completion"))
    too_long = len(turns) > MAX_TURNS
    item["turns"] = turns[:MAX_TURNS]

    if not isinstance(prompt, str):
        # A chat prompt: the last user message is what identifies the task.
        users = [t["text"] for t in turns if t["role"] == "user"]
        prompt = users[-1] if users else (_text(prompt) if prompt is not None else "")
    item["prompt"] = _clip(prompt, MAX_TEXT)
    task_id = obj.get("task_id")
    item["task_id"] = str(task_id)[:MAX_TASK_ID] if task_id not in (None, "") else prompt_task_id(prompt)

    components = _components(obj.get("components"))
    if components is None:
        raise ValueError("components must be a list of {name, raw, weight, weighted} or a {name: value} dict")
    item["components"] = components
    reward = _number(obj.get("reward"))
    if reward is None and obj.get("reward") is None and components:
        reward = sum(c["weighted"] for c in components)
    if reward is None:
        raise ValueError(f"trajectory has no finite reward (got {obj.get('reward')!r})")
    item["reward"] = reward
    if "advantage" in obj:
        item["advantage"] = _number(obj["advantage"])
    status = obj.get("status", "ok")
    item["status"] = "truncated" if too_long else status if status in TRAJECTORY_STATUSES else "ok"
    split = obj.get("split", "train")
    item["split"] = split if split in SPLITS else "train"
    for key in ("group", "sample", "seed", "policy_version", "prompt_tokens", "completion_tokens", "rubric_version"):
        value = _integer(obj.get(key))
        if value is not None and (value >= 0 or key == "seed"):
            item[key] = value
    if isinstance(obj.get("env_state"), Mapping):
        item["env_state"] = jsonable(obj["env_state"])
    return item


def _chunks(items: list[dict[str, Any]]) -> Iterable[list[dict[str, Any]]]:
    """Split a long list of trajectories into events that stay well under the server's limits."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for item in items:
        item_size = len(json.dumps(item, separators=(",", ":")))
        if chunk and (len(chunk) >= MAX_ITEMS_PER_EVENT or size + item_size > MAX_EVENT_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += item_size
    if chunk:
        yield chunk


class Run:
    """A run being reported. Thread-safe; every `log_*` returns at once (the sink sends in the background)."""

    def __init__(self, run_id: int, token: str, url: str, *, page_url: str = "", start_seq: int = 1,
                 sink: Any = None, **sink_options: Any) -> None:
        self.id = run_id
        self.token = token
        self.url = url.rstrip("/")
        self.page_url = page_url
        self.sink = sink if sink is not None else HttpSink(self.url, run_id, token, start_seq=start_seq, **sink_options)
        self.finished = False
        self.status: str | None = None
        self._lock = threading.Lock()
        self._cancel_seen = False
        self._dropped = 0
        self._warned: set[str] = set()
        # (step, split) → {task key: [group index, next sample index]}, for trajectories without indices.
        self._groups: dict[tuple[int, str], dict[str, list[int]]] = {}
        _OPEN_RUNS.add(self)

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.page_url or self.url}>"

    # --- reporting --------------------------------------------------------------------------------

    def log_metrics(self, step: int, values: Mapping[str, Any], *, tokens: int | None = None) -> None:
        """Scalars at a training step. NaN/inf travel as null (skipped by the server)."""
        step_ = self._step(step)
        if step_ is None:
            return
        clean: dict[str, float | None] = {}
        for key, value in values.items():
            name = str(key)
            if not name or len(name) > MAX_METRIC_NAME:
                self._drop(f"metric name {name[:40]!r} is empty or longer than {MAX_METRIC_NAME} characters")
                continue
            if value is not None and not isinstance(value, (int, float)) and not hasattr(value, "item"):
                self._drop(f"metric {name!r} is not a number ({type(value).__name__})")
                continue
            clean[name] = _number(value)  # NaN, inf → null
        if not clean:
            return
        event: dict[str, Any] = {"type": "metrics", "step": step_, "values": clean}
        if tokens is not None and _integer(tokens) is not None and _integer(tokens) >= 0:
            event["tokens"] = _integer(tokens)
        self._emit(event)

    def log_trajectories(self, step: int, trajectories: Iterable[Any], *, split: str | None = None) -> int:
        """Rollouts at a step: wire-format dicts, {"prompt", "completion", "reward"} dicts, chat messages,
        or `trainers.types.Trajectory` objects (see `trajectory_item`).

        Trajectories without "group" / "sample" are grouped by task (same task_id, or same prompt) within
        the step — also across several calls for the same step — and numbered in order. Returns how many
        were queued.
        """
        step_ = self._step(step)
        if step_ is None:
            return 0
        items = []
        for obj in trajectories:
            try:
                item = trajectory_item(obj)
            except ValueError as exc:
                self._drop(f"trajectory dropped: {exc}")
                continue
            if split is not None:
                item["split"] = split if split in SPLITS else "train"
            items.append(item)
        with self._lock:
            self._number_groups(step_, items)
        for chunk in _chunks(items):
            self._emit({"type": "trajectories", "step": step_, "items": chunk})
        return len(items)

    def log_checkpoint(self, step: int, path: str, metrics: Mapping[str, Any] | None = None, *,
                       kind: str = "full") -> None:
        """A checkpoint the trainer saved (the dashboard lists it and can offer it for resume)."""
        step_ = self._step(step)
        if step_ is None:
            return
        path = str(path)
        if not path or len(path) > MAX_CHECKPOINT_PATH:
            self._drop(f"checkpoint path is empty or longer than {MAX_CHECKPOINT_PATH} characters")
            return
        self._emit({"type": "checkpoint", "step": step_, "path": path, "kind": kind if kind in ("full", "adapter")
                    else "full", "metrics": jsonable(dict(metrics or {}))})

    def log(self, message: str, level: str = "info") -> None:
        """A line for the run's log."""
        self._emit({"type": "log", "level": str(level)[:20], "message": _clip(str(message), MAX_LOG_MESSAGE)})

    def should_cancel(self) -> bool:
        """Whether someone asked the dashboard to cancel this run (known from the latest reply; the
        sink talks to the server at least every few seconds, heartbeats included)."""
        cancel = bool(self.sink.control().get("cancel"))
        if cancel:
            self._cancel_seen = True
        return cancel

    @property
    def stats(self) -> dict[str, int]:
        """The sink's counters (sent, duplicates, retries, dropped, rejected) plus invalid pieces dropped here."""
        return {**getattr(self.sink, "stats", {}), "invalid": self._dropped}

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything logged so far is stored (or timeout). Returns whether it drained."""
        result = self.sink.flush(timeout_s)
        return result is not False

    def finish(self, status: str = "SUCCEEDED", message: str = "", *, traceback: str | None = None,
               timeout_s: float = 30.0) -> bool:
        """Report the final status and deliver what is queued (waits up to `timeout_s`). Idempotent.
        Returns whether everything reached the dashboard."""
        with self._lock:
            if self.finished:
                return True
            self.finished = True
        status = status.upper()
        if status not in FINAL_STATUSES:
            raise ValueError(f"status must be one of {', '.join(FINAL_STATUSES)}")
        event: dict[str, Any] = {"type": "status", "status": status}
        if message:
            event["message"] = _clip(str(message), 5000)
        if traceback:
            event["traceback"] = _clip(traceback, MAX_TEXT)
        self.status = status
        self.sink.emit(event)
        delivered = self.sink.close(timeout_s)
        _OPEN_RUNS.discard(self)
        return delivered is not False

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if exc_type is None:
            self.finish("CANCELLED" if self._cancel_seen else "SUCCEEDED",
                        "stopped on the dashboard's request" if self._cancel_seen else "")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.finish("CANCELLED", "interrupted (KeyboardInterrupt)")
        else:
            self.finish("FAILED", f"{exc_type.__name__}: {exc}",
                        traceback="".join(traceback_module.format_exception(exc_type, exc, tb)))
        return False  # never swallow the exception

    # --- internals --------------------------------------------------------------------------------

    def _emit(self, event: dict[str, Any]) -> None:
        if self.finished:
            self._drop(f"{event['type']} event after finish()")
            return
        self.sink.emit(event)

    def _step(self, step: Any) -> int | None:
        value = _integer(step)
        if value is None or value < 0:
            self._drop(f"step must be a non-negative integer, not {step!r}")
            return None
        return value

    def _drop(self, reason: str) -> None:
        self._dropped += 1
        key = reason[:60]
        if key not in self._warned and len(self._warned) < 100:
            self._warned.add(key)
            log.warning("rollout studio run %s: %s (dropped; further drops like this are counted silently)",
                        self.id, reason)

    def _number_groups(self, step: int, items: list[dict[str, Any]]) -> None:
        for item in items:
            if "group" in item and "sample" in item:
                continue
            groups = self._groups.setdefault((step, item["split"]), {})
            slot = groups.get(item["task_id"])
            if slot is None:
                used = {g for g, _ in groups.values()}
                slot = groups[item["task_id"]] = [item.get("group", len(used)), 0]
            item.setdefault("group", slot[0])
            if "sample" not in item:
                item["sample"] = slot[1]
            slot[1] = max(slot[1], item["sample"]) + 1
        # Old steps never come back in practice: keep the bookkeeping small.
        if len(self._groups) > 16:
            for key in sorted(self._groups)[:-8]:
                del self._groups[key]


_OPEN_RUNS: weakref.WeakSet[Run] = weakref.WeakSet()


@atexit.register
def _flush_open_runs() -> None:
    # A script that never called finish(): deliver what it logged (the run stays RUNNING until the
    # dashboard notices the missing heartbeats and marks it LOST).
    for run in list(_OPEN_RUNS):
        try:
            run.flush(timeout_s=10)
        except Exception:  # noqa: BLE001 — interpreter shutdown: report and go on
            log.exception("could not flush run %s at exit", run.id)


class Studio:
    """A connection to a Rollout Studio dashboard with a personal API token (`rsu_…`)."""

    def __init__(self, url: str | None = None, api_token: str | None = None, *, timeout_s: float = 30.0,
                 session: requests.Session | None = None) -> None:
        url = url or os.environ.get("ROLLOUT_STUDIO_URL", "")
        if not url:
            raise StudioError("no dashboard URL: pass url= or set ROLLOUT_STUDIO_URL")
        self.url = url.rstrip("/")
        self.api_token = api_token or os.environ.get("ROLLOUT_STUDIO_API_TOKEN", "")
        self.timeout_s = timeout_s
        self.session = session  # None: a short-lived connection per call (no idle socket left open)

    def start_run(
        self,
        *,
        project: str,
        name: str,
        config: Mapping[str, Any] | None = None,
        algorithm: str = "external",
        environment: int | None = None,
        rubric: int | None = None,
        max_steps: int = 0,
        **sink_options: Any,
    ) -> Run:
        """Register an external run in `project` and start reporting to it. The one blocking call of
        the SDK (a single request); raises StudioError if the dashboard refuses or cannot be reached."""
        if not self.api_token:
            raise StudioError("no API token: pass api_token= or set ROLLOUT_STUDIO_API_TOKEN (create one under Account → API tokens)")
        body = {"name": name, "config": jsonable(dict(config or {})), "algorithm": algorithm,
                "environment": environment, "rubric": rubric, "max_steps": max_steps}
        url = f"{self.url}/api/projects/{project}/external-runs/"
        try:
            response = (self.session or requests).post(url, json=body, timeout=self.timeout_s,
                                                       headers={"Authorization": f"Bearer {self.api_token}"})
        except requests.RequestException as exc:
            raise StudioError(f"could not reach the dashboard at {self.url}: {exc}") from exc
        if response.status_code != 201:
            raise StudioError(f"the dashboard refused to create the run ({response.status_code}): {response.text[:2000]}")
        data = response.json()
        return Run(data["id"], data["ingest_token"], self.url, page_url=data.get("page_url", ""), **sink_options)

    def attach(self, run_id: int | None = None, run_token: str | None = None, *, start_seq: int | None = None,
               mark_running: bool = True, **sink_options: Any) -> Run:
        """Report to an existing run (one the dashboard dispatched) with its ingestion token (`rsr_…`);
        both default to $ROLLOUT_STUDIO_RUN_ID / $ROLLOUT_STUDIO_TOKEN, as `python -m trainers train` reads them.

        Sequence numbers continue after the run's last stored event: unless `start_seq` is given, one
        heartbeat is posted first to learn it. Only one reporter per run at a time."""
        return attach(self.url, run_id, run_token, start_seq=start_seq, mark_running=mark_running,
                      timeout_s=self.timeout_s, session=self.session, **sink_options)


def attach(url: str, run_id: int | None = None, run_token: str | None = None, *, start_seq: int | None = None,
           mark_running: bool = True, timeout_s: float = 30.0, session: requests.Session | None = None,
           **sink_options: Any) -> Run:
    """`Studio.attach` without a personal API token: the run token alone is enough to report."""
    url = url.rstrip("/")
    if run_id is None and os.environ.get("ROLLOUT_STUDIO_RUN_ID", "").isdigit():
        run_id = int(os.environ["ROLLOUT_STUDIO_RUN_ID"])
    run_token = run_token or os.environ.get("ROLLOUT_STUDIO_TOKEN", "")
    if run_id is None or not run_token:
        raise StudioError("attach needs the run id and its ingestion token (or $ROLLOUT_STUDIO_RUN_ID / $ROLLOUT_STUDIO_TOKEN)")
    if start_seq is None:
        start_seq = _next_seq(url, run_id, run_token, timeout_s, session)
    run = Run(run_id, run_token, url, start_seq=start_seq, **sink_options)
    if mark_running:
        # QUEUED → STARTING → RUNNING; the server ignores a transition the run has already made.
        run._emit({"type": "status", "status": "STARTING"})
        run._emit({"type": "status", "status": "RUNNING"})
    return run


def _next_seq(url: str, run_id: int, token: str, timeout_s: float, session: requests.Session | None) -> int:
    """Post a heartbeat as seq 1 — stored on a fresh run, a harmless duplicate otherwise — and read
    the run's last stored sequence number from the reply."""
    try:
        response = (session or requests).post(
            f"{url}/api/runs/{run_id}/events", data=json.dumps({"events": [{"seq": 1, "type": "heartbeat"}]}),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}, timeout=timeout_s,
        )
    except requests.RequestException as exc:
        raise StudioError(f"could not reach the dashboard at {url}: {exc}") from exc
    if response.status_code != 200:
        raise StudioError(f"the dashboard refused the run token ({response.status_code}): {response.text[:2000]}")
    return int(response.json()["last_seq"]) + 1


__all__ = ["Run", "Studio", "StudioError", "attach", "jsonable", "messages_to_turns", "prompt_task_id", "trajectory_item"]
