"""Preview an environment config before a run uses it: what the model will see, or what is wrong.

    preview_environment("openenv", {"url": "http://127.0.0.1:8000"}) -> {
        "ok": True, "kind": "openenv", "errors": {},
        "task": {"id", "prompt", "answer"}, "first_message": str, "system_prompt": str,
        "examples": [{"role", "content"}], "tools": [{"name", "description", "parameters"}],
        "health": "http://127.0.0.1:8000 is healthy; action fields: message.", "message": "",
        "extra": {...},   # kind-specific, e.g. a verifiers environment's rubric as criteria
    }

Bad config gives `ok: False` with field errors (the kind's JSON schema, then the checks a schema cannot
express: the kind class's own `check_config`); a build or server failure gives
`ok: False` with a readable `message`. Nothing raises out of this function: the dashboard shows the
result next to the form.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any

from trainers.registry import UnknownKind, environment_kind

log = logging.getLogger(__name__)


def check_environment_config(kind: str, config: Any) -> dict[str, list[str]]:
    """Field errors of an environment config ({} when valid): the kind's one validation (`KindSpec.validate`:
    its JSON schema, then the class's own cross-field `check_config`)."""
    try:
        spec = environment_kind(kind)
    except UnknownKind as exc:
        return {"kind": [str(exc)]}
    return spec.validate(config)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if not isinstance(exc, (ValueError, RuntimeError)) else str(exc)


def preview_environment(kind: str, config: dict[str, Any], *, seed: int = 0) -> dict[str, Any]:
    """A sample task, the tools, the rendered prompts and (remote kinds) a health line — or the errors."""
    result: dict[str, Any] = {
        "ok": False,
        "kind": kind,
        "errors": {},
        "task": None,
        "first_message": None,
        "system_prompt": None,
        "examples": [],
        "tools": [],
        "health": None,
        "message": "",
        "extra": {},
    }
    errors = check_environment_config(kind, config)
    if errors:
        result["errors"] = errors
        result["message"] = "Fix the highlighted fields."
        return result
    env = None
    try:
        env = environment_kind(kind).build(config)
        health = getattr(env, "preview_health", None)
        if health is not None:
            result["health"] = health()
        task = env.tasks("train", 1, seed)[0]
        result["task"] = {"id": task.id, "prompt": task.prompt, "answer": _jsonable(task.answer)}
        if getattr(env, "preview_can_reset", lambda: True)():
            result["first_message"] = env.reset(task, seed)
            result["system_prompt"] = env.system_prompt()
            result["examples"] = list(env.example_messages()) if hasattr(env, "example_messages") else []
        result["tools"] = [asdict(tool) for tool in getattr(env, "tools", None) or []]
        extra = getattr(env, "preview_extra", None)
        if extra is not None:
            result["extra"] = _jsonable(extra())
        result["ok"] = True
    except Exception as exc:  # noqa: BLE001 — the preview reports every failure (bad package, dead server) as text
        log.info("environment preview failed: %r", exc)
        result["message"] = _describe(exc)
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            try:
                close()
            except Exception as exc:  # noqa: BLE001 — closing a half-built environment must not hide the result
                log.info("closing the previewed environment failed: %r", exc)
    return result


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
