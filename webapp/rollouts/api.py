"""POST /api/runs/<id>/events — where trainers report. Authenticated by the run's own token."""

from __future__ import annotations

import hmac
import json
import re
import threading
from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiExample, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.models import hash_token
from webapp.experiments.models import Run
from webapp.rollouts.ingest import BatchInvalid, ingest_batch


class _InFlight:
    """Counts ingestion requests being processed in this process; past the limit we answer 429 so
    trainers back off instead of piling up behind the database."""

    def __init__(self, limit: int):
        self.limit = limit
        self.count = 0
        self.lock = threading.Lock()

    def enter(self) -> bool:
        with self.lock:
            if self.count >= self.limit:
                return False
            self.count += 1
            return True

    def leave(self) -> None:
        with self.lock:
            self.count -= 1


IN_FLIGHT = _InFlight(getattr(settings, "INGEST_MAX_CONCURRENT", 8))


def _error(status: int, error: str, detail: str, **extra) -> Response:
    return Response({"error": error, "detail": detail, **extra}, status=status)


def _bearer(request: Request) -> str:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    return header[7:].strip() if header.startswith("Bearer ") else ""


def _no_constants(name: str) -> None:
    # Python's json accepts NaN / Infinity, JSON does not (and Postgres's jsonb refuses them).
    raise ValueError(f"{name} is not JSON; send null for a missing number")


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _storable(value: Any) -> Any:
    """The payload with NUL characters and lone surrogates replaced by U+FFFD."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_storable(v) for v in value]
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    return value


class RunEventsView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        summary="Report a batch of run events (trainer → dashboard)",
        description="See docs/api.md, 'Run event ingestion'. Authenticated with the run's ingestion token "
        "(`Authorization: Bearer rsr_…`). Idempotent on (run, seq).",
        request=inline_serializer("EventBatch", {"events": serializers.ListField(child=serializers.DictField())}),
        responses={
            200: inline_serializer(
                "EventBatchReply",
                {
                    "accepted": serializers.IntegerField(),
                    "duplicates": serializers.IntegerField(),
                    "last_seq": serializers.IntegerField(),
                    "control": serializers.DictField(),
                },
            )
        },
        examples=[
            OpenApiExample(
                "metrics",
                request_only=True,
                value={"events": [{"seq": 1, "type": "metrics", "step": 0, "values": {"reward/mean": 0.25}}]},
            )
        ],
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = Run.objects.filter(pk=run_id).only("pk", "project_id", "ingest_token_hash").first()
        token = _bearer(request)
        if run is None or not token or not run.ingest_token_hash or not hmac.compare_digest(
            hash_token(token), run.ingest_token_hash
        ):
            # The same answer for "no such run" and "wrong token": a token cannot probe run ids.
            return _error(401, "unauthorized", "Unknown run or invalid run token.")
        length = int(request.META.get("CONTENT_LENGTH") or 0)
        if length > settings.INGEST_MAX_BATCH_BYTES:
            return _error(413, "batch_too_large", f"A batch may be at most {settings.INGEST_MAX_BATCH_BYTES} bytes; "
                          "send smaller batches.", max_bytes=settings.INGEST_MAX_BATCH_BYTES)
        if not IN_FLIGHT.enter():
            response = _error(429, "overloaded", "Too many batches in flight; retry after the given delay.")
            response["Retry-After"] = "1"
            return response
        try:
            body = request.body
            if len(body) > settings.INGEST_MAX_BATCH_BYTES:
                return _error(413, "batch_too_large", f"A batch may be at most {settings.INGEST_MAX_BATCH_BYTES} bytes.",
                              max_bytes=settings.INGEST_MAX_BATCH_BYTES)
            try:
                payload = json.loads(body, parse_constant=_no_constants)
            except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
                return _error(400, "malformed_json", f"The body is not valid JSON: {exc}")
            if b"\\u0000" in body or _SURROGATE_ESCAPE.search(body):
                # Model output may hold NUL characters or lone surrogates, which Postgres cannot store (and
                # UTF-8 cannot encode): they would fail the whole batch on every retry. Rare, so only such
                # bodies pay for the walk.
                payload = _storable(payload)
            events = payload.get("events") if isinstance(payload, dict) else None
            if isinstance(events, list) and len(events) > settings.INGEST_MAX_EVENTS:
                return _error(413, "batch_too_large", f"A batch may hold at most {settings.INGEST_MAX_EVENTS} events.",
                              max_events=settings.INGEST_MAX_EVENTS)
            try:
                result = ingest_batch(run=run, payload=payload)
            except BatchInvalid as exc:
                return _error(400, "validation_failed", "The batch has invalid events; nothing was stored.",
                              fields=exc.errors)
            return Response(result.reply())
        finally:
            IN_FLIGHT.leave()
