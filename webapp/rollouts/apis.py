"""The rollouts JSON API: what trainers report (`POST /api/runs/<id>/events`, authenticated by the run's
own token; `POST /api/projects/<slug>/external-runs/` to register an external run), and what scripts read
back (trajectories, groups, metrics; the explorer's is review's, `webapp.review.views.explorer`). Thin views: access through `webapp.projects.access`,
writes in the services, reads in the selectors (docs/api.md)."""

from __future__ import annotations

import hmac
import threading
from typing import Any

from django.conf import settings
from django.http import HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import exceptions, generics, serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trainers.sdk import wire_docs
from webapp.accounts.models import hash_token
from webapp.api.base import BAD_REQUEST, NOT_FOUND, DownloadNegotiation, parse, secret_response
from webapp.api.errors import flatten_errors
from webapp.api.parsers import NUL_ESCAPE, SURROGATE_ESCAPE, UNSTORABLE, load_json
from webapp.api.serializers import BodyTooLargeSerializer, ErrorSerializer
from webapp.core.views import json_bytes_response
from webapp.experiments.models import Environment, Rubric, Run
from webapp.projects.access import (
    Capability,
    NotFound,
    access_project,
    access_run,
)
from webapp.rollouts import serializers as s
from webapp.rollouts.alarms import announce_hacking_alarm
from webapp.rollouts.external import external_run_create
from webapp.rollouts.ingest import BatchConflict, BatchInvalid, RunTokenStale, ingest_batch
from webapp.rollouts.selectors import metrics
from webapp.rollouts.selectors import runs as rollout_selectors
from webapp.rollouts.selectors import trajectories as trajectory_selectors


class RunTrajectoryListView(generics.ListAPIView):
    serializer_class = s.TrajectorySerializer

    def get_queryset(self):
        run = access_run(self.request.user, self.kwargs["pk"])
        query = parse(s.TrajectoryFilterSerializer, self.request.query_params)
        return rollout_selectors.trajectory_list(
            run=run,
            step=query.get("step"),
            split=query.get("split"),
            min_reward=query.get("min_reward"),
            max_reward=query.get("max_reward"),
            group_index=query.get("group"),
            task_id=query.get("task_id"),
            status=query.get("status"),
        )

    @extend_schema(parameters=[s.TrajectoryFilterSerializer])
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)


class RunTrajectoryDetailView(APIView):
    @extend_schema(
        parameters=[s.TrajectoryDetailQuerySerializer],
        responses={200: s.TrajectoryDetailSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, pk: int, trajectory_id: int) -> Response:
        run = access_run(request.user, pk)
        query = parse(s.TrajectoryDetailQuerySerializer, request.query_params)
        trajectory = rollout_selectors.trajectory_get(run=run, trajectory_id=trajectory_id)
        if trajectory is None:
            raise NotFound("No such trajectory in this run.")
        return Response(s.TrajectoryDetailSerializer(trajectory, context=query).data)


class RunTrajectoryAtifView(APIView):
    content_negotiation_class = DownloadNegotiation

    @extend_schema(
        responses={
            (200, "application/json"): OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="one ATIF v1.7 trajectory (Harbor's Agent Trajectory Interchange Format), with "
                "prompt and completion token ids per agent step and the reward in extra.rollout_studio",
            ),
            404: NOT_FOUND,
        },
        summary="Download one trajectory as ATIF",
    )
    def get(self, request: Request, pk: int, trajectory_id: int) -> HttpResponseBase:
        run = access_run(request.user, pk)
        trajectory = rollout_selectors.trajectory_get(run=run, trajectory_id=trajectory_id)
        if trajectory is None:
            raise NotFound("No such trajectory in this run.")
        response = JsonResponse(
            trajectory_selectors.trajectory_atif(trajectory), json_dumps_params={"ensure_ascii": False}
        )
        response["Content-Disposition"] = f'attachment; filename="trajectory-{trajectory.pk}.atif.json"'
        return response


class AtifExportQuerySerializer(serializers.Serializer):
    split = serializers.ChoiceField(choices=["train", "eval"], required=False, help_text="only this split")
    step = serializers.IntegerField(min_value=0, required=False, help_text="only this step")


class RunAtifView(APIView):
    content_negotiation_class = DownloadNegotiation

    @extend_schema(
        parameters=[AtifExportQuerySerializer],
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(
                OpenApiTypes.STR, description="one ATIF v1.7 trajectory per line, in step order"
            ),
            400: BAD_REQUEST,
            404: NOT_FOUND,
        },
        summary="Download the run's trajectories as ATIF (JSON lines)",
    )
    def get(self, request: Request, pk: int) -> HttpResponseBase:
        run = access_run(request.user, pk)
        query = parse(AtifExportQuerySerializer, request.query_params)
        response = StreamingHttpResponse(
            trajectory_selectors.run_atif_lines(run, split=query.get("split"), step=query.get("step")),
            content_type="application/x-ndjson",
        )
        response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.atif.jsonl"'
        return response


class RunGroupListView(APIView):
    @extend_schema(
        parameters=[s.GroupQuerySerializer],
        responses={200: s.GroupPageSerializer, 404: NOT_FOUND},
        summary="GRPO groups of a run, newest steps first, with their reward statistics",
    )
    def get(self, request: Request, pk: int) -> Response:
        run = access_run(request.user, pk)
        query = parse(s.GroupQuerySerializer, request.query_params)
        page = trajectory_selectors.group_summaries(
            run=run, split=query.get("split"), before_step=query.get("before")
        )
        return Response(s.GroupPageSerializer(page).data)


class RunMetricsView(APIView):
    @extend_schema(
        parameters=[s.MetricsQuerySerializer],
        responses={200: s.MetricsSerializer, 404: NOT_FOUND},
        summary="Per-key metric series (optionally of a step range), downsampled on the server when long",
    )
    def get(self, request: Request, pk: int) -> HttpResponseBase:
        run = access_run(request.user, pk)
        query = parse(s.MetricsQuerySerializer, request.query_params)
        keys = [k.strip() for k in query["keys"].split(",") if k.strip()] if "keys" in query else None
        available = metrics.metric_keys(run)
        keys = [key for key in keys if key in available] if keys is not None else available
        series = metrics.metric_series(
            run, keys, max_points=query["max_points"], start=query.get("start"), end=query.get("end")
        )
        body = {
            "run": run.pk,
            "keys": available,
            "series": {
                key: {
                    "key": key,
                    "steps": one.x,
                    "values": one.y,
                    "total_points": one.total,
                    "downsampled": one.downsampled,
                }
                for key, one in series.items()
            },
        }
        # The body as built, in MetricsSerializer's shape (the schema's): through its fields every value
        # went through FloatField one at a time — 25 keys × 2,000 points took longer than reading them.
        return json_bytes_response(body)


# --- ingestion ----------------------------------------------------------------------------------------


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


class _VerifiedTokens:
    """Runs whose token this process has verified: run id → (token hash, project id). A batch whose token
    matches an entry skips the look-up query (an ORM query costs ~0.35 ms of CPU, a twentieth of a batch);
    ingestion checks the hash again on the row it locks, so a token reissued or a run deleted since is
    still refused (401) before anything is written. Bounded: cleared when full."""

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self.entries: dict[int, tuple[str, int]] = {}

    def run(self, run_id: int, token_hash: str) -> Run | None:
        entry = self.entries.get(run_id)
        if entry is None or not hmac.compare_digest(entry[0], token_hash):
            return None
        # The instance `.only("pk", "project_id")` would give (the other fields load when read).
        return Run.from_db(None, ["id", "project_id"], [run_id, entry[1]])

    def remember(self, run: Run, token_hash: str) -> None:
        if len(self.entries) >= self.limit:
            self.entries.clear()
        self.entries[run.pk] = (token_hash, run.project_id)

    def forget(self, run_id: int) -> None:
        self.entries.pop(run_id, None)


VERIFIED_TOKENS = _VerifiedTokens()


def _authenticated_run(run_id: int, token: str) -> tuple[Run | None, str]:
    """The run `token` opens, with the token's hash; None when the run does not exist or the token is not
    its own."""
    if not token:
        return None, ""
    token_hash = hash_token(token)
    run = VERIFIED_TOKENS.run(run_id, token_hash)
    if run is not None:
        return run, token_hash
    run = Run.objects.filter(pk=run_id).only("pk", "project_id", "ingest_token_hash").first()
    if run is None or not run.ingest_token_hash or not hmac.compare_digest(token_hash, run.ingest_token_hash):
        return None, token_hash
    VERIFIED_TOKENS.remember(run, token_hash)
    return run, token_hash


def _unauthorized() -> Response:
    # The same answer for "no such run" and "wrong token": a token cannot probe run ids.
    return _error(401, "unauthorized", "Unknown run or invalid run token.")


def _bearer(request: Request) -> str:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    return header[7:].strip() if header.startswith("Bearer ") else ""


def _storable(value: Any) -> Any:
    """The payload with NUL characters and lone surrogates replaced by U+FFFD."""
    if isinstance(value, str):
        return UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_storable(v) for v in value]
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    return value


def _is_json(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def _error_response(description: str, serializer=ErrorSerializer) -> OpenApiResponse:
    return OpenApiResponse(serializer, description=description)


class RunEventsView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        summary="Report a batch of run events (trainer → dashboard)",
        description="See docs/api.md, 'Run event ingestion'. Authenticated with the run's ingestion token "
        "(`Authorization: Bearer rsr_…`). Idempotent on (run, seq). The request schema is the wire format "
        "(`trainers/sdk/wire.py`), the one ingestion checks every batch against.",
        auth=[{"runToken": []}],
        request={"application/json": wire_docs.json_schema()},
        responses={
            200: inline_serializer(
                "EventBatchReply",
                {
                    "accepted": serializers.IntegerField(),
                    "duplicates": serializers.IntegerField(),
                    "last_seq": serializers.IntegerField(),
                    "control": inline_serializer("EventBatchControl", {"cancel": serializers.BooleanField()}),
                },
            ),
            400: BAD_REQUEST,
            401: _error_response("unknown run or invalid run token (`unauthorized`)"),
            409: _error_response(
                "a trajectory's (step, split, group, sample) is already stored for this run (`conflict`)"
            ),
            413: _error_response(
                "more than INGEST_MAX_BATCH_BYTES bytes or INGEST_MAX_EVENTS events (`batch_too_large`)",
                BodyTooLargeSerializer,
            ),
            415: _error_response("the body is not `application/json` (`unsupported_media_type`)"),
            429: _error_response(
                "too many batches in flight (`overloaded`); retry after `Retry-After` seconds"
            ),
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
        run, token_hash = _authenticated_run(run_id, _bearer(request))
        if run is None:
            return _unauthorized()
        length = int(request.META.get("CONTENT_LENGTH") or 0)
        if length > settings.INGEST_MAX_BATCH_BYTES:
            return _error(
                413,
                "batch_too_large",
                f"A batch may be at most {settings.INGEST_MAX_BATCH_BYTES} bytes; send smaller batches.",
                max_bytes=settings.INGEST_MAX_BATCH_BYTES,
            )
        if not _is_json(request.content_type or ""):
            return _error(
                415,
                "unsupported_media_type",
                f"Send the batch as application/json (got {request.content_type or 'no Content-Type'!r}).",
            )
        if not IN_FLIGHT.enter():
            response = _error(429, "overloaded", "Too many batches in flight; retry after the given delay.")
            response["Retry-After"] = "1"
            return response
        try:
            body = request.body
            if len(body) > settings.INGEST_MAX_BATCH_BYTES:
                return _error(
                    413,
                    "batch_too_large",
                    f"A batch may be at most {settings.INGEST_MAX_BATCH_BYTES} bytes.",
                    max_bytes=settings.INGEST_MAX_BATCH_BYTES,
                )
            try:
                # Depth is checked field by field by the wire format (with paths); here only a document too
                # deep for the parser itself is refused.
                payload = load_json(body, check_depth=False)
            except exceptions.ParseError as exc:
                return _error(400, "malformed_json", str(exc.detail))
            except exceptions.ValidationError as exc:
                return _error(
                    400,
                    "validation_failed",
                    "The batch is invalid; nothing was stored.",
                    fields=flatten_errors(exc.detail),
                )
            if NUL_ESCAPE.search(body) or SURROGATE_ESCAPE.search(body):
                # Model output may hold NUL characters or lone surrogates, which Postgres cannot store (and
                # UTF-8 cannot encode): they would fail the whole batch on every retry. Rare, so only such
                # bodies pay for the walk.
                payload = _storable(payload)
            events = payload.get("events") if isinstance(payload, dict) else None
            if isinstance(events, list) and len(events) > settings.INGEST_MAX_EVENTS:
                return _error(
                    413,
                    "batch_too_large",
                    f"A batch may hold at most {settings.INGEST_MAX_EVENTS} events.",
                    max_events=settings.INGEST_MAX_EVENTS,
                )
            try:
                result = ingest_batch(run=run, payload=payload, token_hash=token_hash)
            except RunTokenStale:
                VERIFIED_TOKENS.forget(run_id)
                return _unauthorized()
            except BatchInvalid as exc:
                return _error(
                    400,
                    "validation_failed",
                    "The batch has invalid events; nothing was stored.",
                    fields=exc.errors,
                )
            except BatchConflict as exc:
                return _error(409, "conflict", str(exc))
            announce_hacking_alarm(run, result.summaries)
            return Response(result.reply())
        finally:
            IN_FLIGHT.leave()


# --- external runs ------------------------------------------------------------------------------------


class ExternalRunListView(APIView):
    @extend_schema(
        request=s.ExternalRunInputSerializer,
        responses={201: s.ExternalRunCreatedSerializer},
        summary="Register an external run (TRL, verl, your script); the reply carries its ingestion token, once",
        examples=[
            OpenApiExample(
                "TRL",
                request_only=True,
                value={"name": "grpo-qwen", "algorithm": "trl-grpo", "config": {"beta": 0.0}},
            )
        ],
    )
    def post(self, request: Request, slug: str) -> Response:
        project = access_project(request.user, slug, Capability.LAUNCH).project
        serializer = s.ExternalRunInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        errors: dict[str, list[str]] = {}
        environment = rubric = None
        if data.get("environment") is not None:
            environment = Environment.objects.filter(project=project, pk=data["environment"]).first()
            if environment is None:
                errors["environment"] = ["No such environment in this project."]
        if data.get("rubric") is not None:
            rubric = Rubric.objects.filter(project=project, pk=data["rubric"]).first()
            if rubric is None:
                errors["rubric"] = ["No such rubric in this project."]
        if errors:
            raise serializers.ValidationError(errors)
        run, token = external_run_create(
            project=project,
            user=request.user,
            name=data["name"],
            config=data.get("config"),
            algorithm=data["algorithm"],
            environment=environment,
            rubric=rubric,
            max_steps=data["max_steps"],
        )
        return secret_response(
            {
                "id": run.pk,
                "project": project.slug,
                "name": run.name,
                "status": run.status,
                "origin": run.origin,
                "ingest_token": token,
                "events_url": request.build_absolute_uri(reverse("run_events", args=[run.pk])),
                "page_url": request.build_absolute_uri(
                    reverse("experiments:run_detail", kwargs={"slug": project.slug, "run_id": run.pk})
                ),
            }
        )
