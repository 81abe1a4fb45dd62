"""The checker of the run event wire format (`trainers.sdk.wire`, the shapes' one declaration), compiled
once from the shapes into plain closures: ingestion runs it on every batch (the hot path) and the SDK on what
it is about to send, so a piece the server would refuse is dropped at the client with the same message."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from trainers.sdk.wire import (
    EVENT,
    EVENT_TYPES,
    EVENTS,
    INT64_MAX,
    INT64_MIN,
    MAX_JSON_DEPTH,
    MAX_METRIC_NAME,
    TRAJECTORY,
    Errors,
    Field,
    Shape,
    packed_length,
)

# --- the checker: compiled once from the shapes ---------------------------------------------------------
# Each field becomes a closure value → message (None when valid); an object's checker walks the
# object's own keys. Paths are built only on failure: a valid batch (the common case) allocates none.

# A message, or (key inside the value, message) when the problem is one entry of an object.
_Check = Callable[[Any], "str | tuple[str, str] | None"]


def _finite(value: Any) -> bool:
    if type(value) is float:
        return math.isfinite(value)
    try:
        return math.isfinite(float(value))  # an int too large for a double is not storable either
    except OverflowError:
        return False


def json_depth_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a parsed JSON value nests deeper than `limit` (iterative: no recursion to overflow)."""
    stack = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(current, dict):
            stack.extend((v, depth + 1) for v in current.values() if isinstance(v, (dict, list)))
        elif isinstance(current, list):
            stack.extend((v, depth + 1) for v in current if isinstance(v, (dict, list)))
    return False


def _field_check(f: Field) -> _Check:
    """The closure that checks one value of field `f` (compiled once; it runs on every value ingested)."""
    if f.type in ("integer", "number", "string", "boolean"):
        return _scalar_check(f)
    return _collection_check(f)


def _scalar_check(f: Field) -> _Check:
    nullable = f.nullable
    null_msg = "Must not be null."
    if f.type == "integer":
        low = INT64_MIN if f.minimum is None else int(f.minimum)
        high = INT64_MAX if f.maximum is None else int(f.maximum)
        out_of_range = f"Must be an integer between {low} and {high}."

        def check(v: Any) -> str | tuple[str, str] | None:
            if type(v) is int:  # exact type: bool is not an integer here
                return None if low <= v <= high else out_of_range
            if v is None:
                return None if nullable else null_msg
            return "Must be an integer."

        return check
    if f.type == "number":

        def check(v: Any) -> str | tuple[str, str] | None:
            if type(v) is float or type(v) is int:
                return None if _finite(v) else "Must be a finite number."
            if v is None:
                return None if nullable else null_msg
            return "Must be a number."

        return check
    if f.type == "string":
        choices = frozenset(f.choices) if f.choices else None
        longest, shortest = f.max_length, f.min_length
        choice_msg = f"Must be one of: {', '.join(f.choices or ())}."

        def check(v: Any) -> str | tuple[str, str] | None:
            if type(v) is str:
                if choices is not None:
                    return None if v in choices else choice_msg
                if longest is not None and len(v) > longest:
                    return f"At most {longest} characters (this one has {len(v)})."
                if len(v) < shortest:
                    return "Must not be empty."
                return None
            if v is None:
                return None if nullable else null_msg
            return "Must be a string."

        return check
    if f.type == "boolean":

        def check(v: Any) -> str | tuple[str, str] | None:
            if v is True or v is False:
                return None
            if v is None:
                return None if nullable else null_msg
            return "Must be true or false."

        return check
    raise AssertionError(f.type)  # (the dispatcher sends only these four)


def _collection_check(f: Field) -> _Check:
    nullable = f.nullable
    null_msg = "Must not be null."
    if f.type == "integers":
        low, high = int(f.minimum or 0), int(f.maximum or INT64_MAX)
        most: int = f.max_length or INT64_MAX

        def check(v: Any) -> str | tuple[str, str] | None:
            if type(v) is list:
                if not v:
                    return None
                # set(map(type, …)), min() and max() run in C: token lists are thousands long.
                if set(map(type, v)) != {int}:
                    return "Must be a list of integers."
                if len(v) > most:
                    return f"At most {most} entries."
                if min(v) < low or max(v) > high:
                    return f"Every entry must be between {low} and {high}."
                return None
            if v is None:
                return None if nullable else null_msg
            return "Must be a list of integers."

        return check
    if f.type == "numbers":
        longest, shortest = f.max_length or INT64_MAX, f.min_length

        def check(v: Any) -> str | tuple[str, str] | None:
            if type(v) is dict:
                if len(v) < shortest:
                    return "Must not be empty."
                if len(v) > longest:
                    return f"At most {longest} entries."
                for key, value in v.items():
                    if not key or len(key) > MAX_METRIC_NAME:
                        return f"Name {key[:40]!r} must be 1 to {MAX_METRIC_NAME} characters."
                    if value is not None and (type(value) not in (int, float) or not _finite(value)):
                        return key, "Must be a finite number or null."
                return None
            if v is None:
                return None if nullable else null_msg
            return "Must be an object of name → number."

        return check
    if f.type in ("halves", "octets"):
        width = 2 if f.type == "halves" else 1
        most = f.max_length or INT64_MAX
        words = "half floats" if width == 2 else "bytes"

        def check(v: Any) -> str | tuple[str, str] | None:
            if type(v) is str:
                count = packed_length(v, width)
                if count is None:
                    return f"Must be base64 of little-endian {words}."
                return f"At most {most} entries." if count > most else None
            if v is None:
                return None if nullable else null_msg
            return f"Must be a string: base64 of little-endian {words}."

        return check
    if f.type == "object":

        def check(v: Any) -> str | tuple[str, str] | None:
            if type(v) is dict:
                return f"Nested deeper than {MAX_JSON_DEPTH} levels." if json_depth_exceeds(v) else None
            if v is None:
                return None if nullable else null_msg
            return "Must be an object."

        return check
    raise ValueError(
        f"field {f.name}: type {f.type!r} has no checker (lists of objects are walked by the shape)"
    )


_ShapeCheck = Callable[[Any, str, Errors], None]


def _fail(errors: Errors, path: str, message: str) -> None:
    errors.setdefault(path, []).append(message)


def _compile(shape: Shape, extra: Iterable[Field] = ()) -> _ShapeCheck:
    fields = (*extra, *shape.fields)
    plain: dict[str, _Check] = {}
    nested: dict[str, tuple[Field, _ShapeCheck]] = {}
    for f in fields:
        if f.type in ("list", "record"):
            assert f.items is not None
            nested[f.name] = (f, _compile(f.items))
        else:
            plain[f.name] = _field_check(f)
    required = frozenset(f.name for f in fields if f.required)
    known = frozenset(plain) | frozenset(nested)
    known_list = ", ".join(f.name for f in fields)
    rules = shape.rules

    def check(obj: Any, path: str, errors: Errors) -> None:
        if type(obj) is not dict:
            _fail(errors, path, "Must be a JSON object.")
            return
        before = len(errors)
        missing = required - obj.keys()
        for name in sorted(missing):
            _fail(errors, f"{path}.{name}", "This field is required.")
        for key, value in obj.items():
            check_value = plain.get(key)
            if check_value is not None:
                message = check_value(value)
                if message is not None:
                    if isinstance(message, tuple):
                        _fail(errors, f"{path}.{key}.{message[0]}", message[1])
                    else:
                        _fail(errors, f"{path}.{key}", message)
                continue
            if key in nested:
                list_field, check_item = nested[key]
                if list_field.type == "record":
                    if value is not None or not list_field.nullable:
                        check_item(value, f"{path}.{key}", errors)
                else:
                    _check_list(list_field, check_item, value, f"{path}.{key}", errors)
            elif key not in known:
                _fail(errors, f"{path}.{key}", f"Unknown field; a {shape.name} has: {known_list}.")
        if rules and len(errors) == before:
            for rule in rules:
                for name, message in rule(obj):
                    _fail(errors, f"{path}.{name}", message)

    return check


def _check_list(f: Field, check_item: _ShapeCheck, value: Any, path: str, errors: Errors) -> None:
    if type(value) is not list:
        if value is None and not f.required:
            return
        _fail(errors, path, "Must be a list.")
        return
    if len(value) < f.min_length:
        _fail(errors, path, "Must not be empty.")
    if f.max_length is not None and len(value) > f.max_length:
        _fail(errors, path, f"At most {f.max_length} entries (this one has {len(value)}).")
        return
    for index, item in enumerate(value):
        check_item(item, f"{path}.{index}", errors)


_EVENT_CHECKS = {kind: _compile(shape, EVENT.fields) for kind, shape in EVENTS.items()}
_CHECK_TRAJECTORY = _compile(TRAJECTORY)
_CHECK_SEQ = _field_check(EVENT["seq"])


def check_batch(payload: Any) -> Errors:
    """Every problem with a batch as {field path: [messages]} ({} when it is valid)."""
    if type(payload) is not dict or type(payload.get("events")) is not list:
        return {"events": ["The body must be a JSON object with a list under 'events'."]}
    unknown = set(payload) - {"events"}
    if unknown:
        return {sorted(unknown)[0]: ["Unknown field; a batch has only 'events'."]}
    events = payload["events"]
    if not events:
        return {"events": ["The batch is empty."]}
    errors: Errors = {}
    seen: set[int] = set()
    for index, event in enumerate(events):
        path = f"events.{index}"
        if type(event) is not dict:
            _fail(errors, path, "Each event must be a JSON object.")
            continue
        kind = event.get("type")
        check = _EVENT_CHECKS.get(kind) if type(kind) is str else None
        if check is None:
            _fail(errors, f"{path}.type", f"Must be one of: {', '.join(EVENT_TYPES)}.")
            continue
        check(event, path, errors)
        seq = event.get("seq")
        if _CHECK_SEQ(seq) is None and seq is not None:
            if seq in seen:
                _fail(errors, f"{path}.seq", f"Sequence number {seq} appears twice in this batch.")
            seen.add(seq)
        if kind == "trajectories" and type(event.get("items")) is list:
            _check_unique_samples(event["items"], f"{path}.items", errors)
    return errors


def _check_unique_samples(items: list[Any], path: str, errors: Errors) -> None:
    """A (split, group, sample) names one trajectory of a step: twice in one event is a client bug."""
    first: dict[tuple[Any, Any, Any], int] = {}
    for index, item in enumerate(items):
        if type(item) is not dict:
            continue
        key = (item.get("split", "train"), item.get("group"), item.get("sample"))
        if key in first:
            _fail(
                errors,
                f"{path}.{index}.sample",
                f"Group {key[1]} sample {key[2]} ({key[0]}) appears twice in this event (also item {first[key]}).",
            )
        else:
            first[key] = index


def check_item(item: Any) -> Errors:
    """Problems with one trajectory item, paths relative to it (the SDK checks before it sends)."""
    errors: Errors = {}
    _CHECK_TRAJECTORY(item, "", errors)
    return {path.lstrip("."): messages for path, messages in errors.items()}


def check_event(event: Any) -> Errors:
    """Problems with one event, paths relative to it."""
    errors = check_batch({"events": [event]})
    return {path.removeprefix("events.0").lstrip("."): messages for path, messages in errors.items()}
