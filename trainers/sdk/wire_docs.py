"""Documents derived from the run event wire format (`trainers.sdk.wire`): the JSON Schema of a batch,
published in the OpenAPI document, and the field tables of docs/api.md (a test keeps the two equal)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainers.sdk.wire import (
    EVENT,
    EVENTS,
    INT64_MAX,
    MAX_EVENTS_PER_BATCH,
    MAX_JSON_DEPTH,
    MAX_METRIC_NAME,
    Field,
    Shape,
)

# --- derived documents: JSON Schema and the docs tables ------------------------------------------------


def _field_schema(f: Field) -> dict[str, Any]:
    schema: dict[str, Any]
    if f.type == "integer":
        schema = {"type": "integer", "minimum": f.minimum, "maximum": f.maximum}
    elif f.type == "number":
        schema = {"type": "number"}
    elif f.type == "string":
        schema = {"type": "string"}
        if f.choices:
            schema["enum"] = list(f.choices)
        else:
            if f.max_length is not None:
                schema["maxLength"] = f.max_length
            if f.min_length:
                schema["minLength"] = f.min_length
    elif f.type == "boolean":
        schema = {"type": "boolean"}
    elif f.type == "integers":
        schema = {
            "type": "array",
            "maxItems": f.max_length,
            "items": {"type": "integer", "minimum": f.minimum, "maximum": f.maximum},
        }
    elif f.type == "numbers":
        schema = {
            "type": "object",
            "additionalProperties": {"type": ["number", "null"]},
            "propertyNames": {"minLength": 1, "maxLength": MAX_METRIC_NAME},
        }
        if f.min_length:
            schema["minProperties"] = f.min_length
        if f.max_length is not None:
            schema["maxProperties"] = f.max_length
    elif f.type == "object":
        schema = {"type": "object", "description": f"nested at most {MAX_JSON_DEPTH} levels deep"}
    elif f.type in ("halves", "octets"):
        words = "little-endian IEEE half floats, NaN: none" if f.type == "halves" else "unsigned bytes"
        schema = {"type": "string", "contentEncoding": "base64", "description": f"base64 of {words}"}
    elif f.type == "record":
        assert f.items is not None
        schema = shape_schema(f.items)
    else:  # list of objects
        assert f.items is not None
        schema = {"type": "array", "items": shape_schema(f.items)}
        if f.min_length:
            schema["minItems"] = f.min_length
        if f.max_length is not None:
            schema["maxItems"] = f.max_length
    if f.nullable:
        schema["type"] = [schema["type"], "null"]
    schema["description"] = f.doc if "description" not in schema else f"{f.doc}; {schema['description']}"
    return schema


def shape_schema(shape: Shape, extra: Iterable[Field] = ()) -> dict[str, Any]:
    fields = (*extra, *shape.fields)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {f.name: _field_schema(f) for f in fields},
        "additionalProperties": False,
    }
    required = [f.name for f in fields if f.required]
    if required:
        schema["required"] = required
    return schema


def json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of an ingestion batch: one event shape per `type`."""
    variants = []
    for kind, shape in EVENTS.items():
        variant = shape_schema(shape, EVENT.fields)
        variant["title"] = f"{kind} event"
        variant["properties"]["type"] = {"const": kind, "description": "the event type"}
        variants.append(variant)
    return {
        "type": "object",
        "required": ["events"],
        "additionalProperties": False,
        "properties": {
            "events": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_EVENTS_PER_BATCH,
                "items": {"oneOf": variants},
            }
        },
    }


def _type_words(f: Field) -> str:
    if f.type == "integer":
        low = "" if f.minimum is None else f"{int(f.minimum):,}"
        words = f"integer {low} – {int(f.maximum or INT64_MAX):,}"
    elif f.type == "string":
        words = (
            " \\| ".join(f"`{c}`" for c in f.choices)
            if f.choices
            else (f"string ≤ {f.max_length:,}" if f.max_length else "string")
        )
    elif f.type == "list":
        words = f"list ≤ {f.max_length:,} of {f.items.name if f.items else ''}"
    else:
        words = {
            "number": "finite number",
            "boolean": "boolean",
            "integers": f"list of integers {int(f.minimum or 0)} – {int(f.maximum or 0):,}",
            "numbers": "object name → number",
            "object": "object",
            "halves": f"base64 half floats ≤ {int(f.max_length or 0):,}",
            "octets": f"base64 bytes ≤ {int(f.max_length or 0):,}",
            "record": f"{f.items.name if f.items else ''} object",
        }[f.type]
    return f"{words} or `null`" if f.nullable else words


def markdown_table(shape: Shape) -> str:
    """The docs/api.md table of a shape (docs and code are compared by a test)."""
    lines = [f"| {shape.name} field | type | required | meaning |", "|---|---|---|---|"]
    for f in shape.fields:
        lines.append(f"| `{f.name}` | {_type_words(f)} | {'yes' if f.required else 'no'} | {f.doc} |")
    return "\n".join(lines)
