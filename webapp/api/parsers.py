"""Request bodies of the JSON API: JSON only (anything else is 415), bounded in size (413) and in depth
(400, naming the field), so that no body can reach a view as a `RecursionError` or fill the database."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson
from django.conf import settings
from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import JSONParser

from trainers.sdk.wire import MAX_JSON_DEPTH
from trainers.sdk.wire_check import json_depth_exceeds
from webapp.api.errors import NON_FIELD, BodyTooLarge

TOO_DEEP = f"Nested deeper than {MAX_JSON_DEPTH} levels."
# A NUL or a lone UTF-16 surrogate can only enter a parsed document through these escapes; neither can be
# stored (Postgres's text and jsonb refuse NUL, UTF-8 cannot encode a surrogate), so bodies with one are
# walked to name the field.
NUL_ESCAPE = re.compile(rb"\\u0000")
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
UNSTORABLE_MESSAGE = "Null characters and lone surrogate characters are not allowed."
# orjson reads an integer past 64 bits as a float where Python's json keeps it exact (a tool's argument
# may be one), so a body with 19 digits in a row anywhere takes the standard parser. Found by mapping
# every digit to 0 and searching for nineteen zeros: a tenth of the time of a regular expression.
_DIGITS_AS_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGIT_RUN = b"0" * 19


def _has_long_digit_run(raw: bytes) -> bool:
    return _LONG_DIGIT_RUN in raw.translate(_DIGITS_AS_ZEROS)


def unstorable_paths(document: Any) -> list[str]:
    """Dotted paths of the strings (values or keys) holding a NUL or a lone surrogate (iterative)."""
    found: list[str] = []
    stack: list[tuple[Any, str]] = [(document, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if UNSTORABLE.search(value):
                found.append(path or NON_FIELD)
        elif isinstance(value, dict):
            for key, item in value.items():
                child = f"{path}.{key}" if path else str(key)
                if UNSTORABLE.search(key):
                    found.append(path or NON_FIELD)
                stack.append((item, child))
        elif isinstance(value, list):
            stack.extend(
                (item, f"{path}.{index}" if path else str(index)) for index, item in enumerate(value)
            )
    return sorted(set(found))


def _no_constants(name: str) -> None:
    # Python's json accepts NaN / Infinity; JSON does not (and Postgres's jsonb refuses them).
    raise ValueError(f"{name} is not JSON; send null for a missing number")


def _finite_float(text: str) -> float:
    # 1e400 is valid JSON that Python reads as infinity: it could not be stored in jsonb, nor answered.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for a double")
    return value


def _parse(raw: bytes, encoding: str) -> Any:
    """The document in `raw`. orjson first — ingestion's metric batches parse ~6× faster, as Python's json
    calls `_finite_float` per number — for what both read alike: UTF-8 with no long digit runs. What
    orjson refuses (NaN, 1e400, lone surrogates, deep nesting, bad UTF-8) goes to Python's json, which
    accepts lone surrogates (stored as U+FFFD) and words the errors the API answers with."""
    if encoding.lower().replace("-", "") == "utf8" and not _has_long_digit_run(raw):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(raw.decode(encoding), parse_constant=_no_constants, parse_float=_finite_float)
    except RecursionError:
        # json's scanner recurses once per level: thousands of levels exhaust the stack before we could look.
        raise exceptions.ValidationError({NON_FIELD: [f"The body is {TOO_DEEP.lower()}"]}) from None
    except (UnicodeDecodeError, LookupError, ValueError) as exc:
        raise exceptions.ParseError(f"The body is not valid JSON: {exc}") from None


def load_json(raw: bytes, encoding: str = "utf-8", *, check_depth: bool = True) -> Any:
    """Parse a request body: `ParseError` (400 malformed_json) for what is not JSON, a `ValidationError`
    (400) for a document nested deeper than `MAX_JSON_DEPTH` under one of its fields or holding a string
    that cannot be stored, by path (`check_depth`; ingestion checks depth field by field itself, with the
    wire format's paths, and stores such characters as U+FFFD)."""
    document = _parse(raw, encoding)
    if not check_depth:
        return document
    if NUL_ESCAPE.search(raw) or SURROGATE_ESCAPE.search(raw):
        paths = unstorable_paths(document)
        if paths:
            raise exceptions.ValidationError({path: [UNSTORABLE_MESSAGE] for path in paths})
    if isinstance(document, dict):
        deep = {key: [TOO_DEEP] for key, value in document.items() if json_depth_exceeds(value)}
        if deep:
            raise exceptions.ValidationError(deep)
    elif json_depth_exceeds(document, MAX_JSON_DEPTH + 1):
        raise exceptions.ValidationError({NON_FIELD: [f"The body is {TOO_DEEP.lower()}"]})
    return document


def read_body(stream, declared_length: int, limit: int) -> bytes:
    """At most `limit` bytes of a body (413 past that, whether or not Content-Length said so)."""
    if declared_length > limit:
        raise BodyTooLarge(limit)
    raw = stream.read(limit + 1) if stream is not None else b""
    if len(raw) > limit:
        raise BodyTooLarge(limit)
    return raw


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with the API's limits: `API_MAX_BODY_BYTES` and `MAX_JSON_DEPTH` per field."""

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        parser_context = parser_context or {}
        request = parser_context.get("request")
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0) if request is not None else 0
        except ValueError:
            declared = 0
        raw = read_body(stream, declared, settings.API_MAX_BODY_BYTES)
        return load_json(raw, parser_context.get("encoding", settings.DEFAULT_CHARSET))


class JsonAnswers(DefaultContentNegotiation):
    """Answers are JSON whatever the `Accept` header asks for: a client that sends `Accept: text/html`
    gets the JSON it can show, not a 406."""

    def select_renderer(self, request, renderers, format_suffix=None):
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except exceptions.NotAcceptable:
            return renderers[0], renderers[0].media_type
