"""The JSON API of experiments: thin views that resolve objects through `webapp.projects.access`, write
through the services, read through the selectors and shape output with the serializers (docs/api.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import FileResponse, Http404, StreamingHttpResponse
from django.http.response import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trainers.config import (
    KNOB_GROUPS,
    PRESET_TITLES,
    PRESETS,
    RUN_CONFIG_SCHEMA,
    default_run_config,
    resolve_run_config,
)
from trainers.envs.preview import preview_environment
from trainers.parts import PART_KNOBS
from trainers.registry import KindSpec, criterion_kinds, environment_kinds
from webapp.api.base import (
    DELETED,
    FORBIDDEN,
    NOT_FOUND,
    VALIDATION_ERROR,
    DownloadNegotiation,
    parse,
    secret_response,
)
from webapp.experiments import selectors
from webapp.experiments import serializers as s
from webapp.experiments import services as experiment_services
from webapp.experiments.models import Checkpoint, Environment, Rubric, Run
from webapp.experiments.parts import parts_by_kind, worker_parts
from webapp.experiments.services.deletion import DELETED_IN_BACKGROUND, run_delete
from webapp.projects.access import (
    Capability,
    access_checkpoint,
    access_environment,
    access_project,
    access_queue,
    access_rubric,
    access_run,
    access_run_to_delete,
    access_snapshot,
    can,
)
from webapp.review.judge_check import judge_check
from webapp.rollouts.selectors import runs as rollout_selectors

# --- environments and rubrics ----------------------------------------------------------------------


@dataclass(frozen=True)
class DefinitionKind:
    """What the environment and rubric APIs (both `VersionedDefinition`) differ in besides their bodies:
    how one is found in a project (with its versions prefetched) and how its versions are listed."""

    with_versions: Callable[..., QuerySet]  # (project=...) → the project's definitions
    access: Callable[..., Any]  # (access, pk, queryset=...) → one of them, or 404
    versions: Callable[[Any], QuerySet]  # (definition) → its versions, newest first

    def one(self, request: Request, slug: str, pk: int, need: Capability) -> Any:
        access = access_project(request.user, slug, need)
        return self.access(access, pk, queryset=self.with_versions(project=access.project))


ENVIRONMENTS = DefinitionKind(
    selectors.environments_with_versions, access_environment, selectors.environment_versions
)
RUBRICS = DefinitionKind(selectors.rubrics_with_versions, access_rubric, selectors.rubric_versions)


class DefinitionListView(generics.ListAPIView):
    """GET: the project's definitions; POST (the subclass's, with its body): create one at version 1."""

    kind: ClassVar[DefinitionKind]

    def get_queryset(self):
        return self.kind.with_versions(
            project=access_project(self.request.user, self.kwargs["slug"], Capability.READ).project
        )

    def created(self, definition: Any) -> Response:
        return Response(self.get_serializer_class()(definition).data, status=201)


class DefinitionDetailView(generics.GenericAPIView):
    """GET: one definition with its latest version; PATCH (the subclass's): edit it."""

    kind: ClassVar[DefinitionKind]

    def definition(self, need: Capability = Capability.READ) -> Any:
        return self.kind.one(self.request, self.kwargs["slug"], self.kwargs["pk"], need)

    def get(self, request: Request, slug: str, pk: int) -> Response:
        return Response(self.get_serializer_class()(self.definition()).data)


class DefinitionVersionListView(generics.ListAPIView):
    """GET: every version of one definition, newest first."""

    kind: ClassVar[DefinitionKind]

    def get_queryset(self):
        return self.kind.versions(
            self.kind.one(self.request, self.kwargs["slug"], self.kwargs["pk"], Capability.READ)
        )


class EnvironmentPreviewView(APIView):
    @extend_schema(
        request=s.EnvironmentPreviewInputSerializer,
        responses={200: s.EnvironmentPreviewSerializer, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="What the model would see with this environment config (nothing is saved)",
    )
    def post(self, request: Request, slug: str) -> Response:
        access_project(request.user, slug, Capability.LAUNCH)
        body = parse(s.EnvironmentPreviewInputSerializer, request.data)
        return Response(preview_environment(body["kind"], body["config"]))


class EnvironmentListView(DefinitionListView):
    serializer_class = s.EnvironmentSerializer
    kind = ENVIRONMENTS

    @extend_schema(
        request=s.EnvironmentInputSerializer,
        responses={201: s.EnvironmentSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Create an environment (version 1)",
    )
    def post(self, request: Request, slug: str) -> Response:
        project = access_project(request.user, slug, Capability.LAUNCH).project
        data = parse(s.EnvironmentInputSerializer, request.data)
        return self.created(
            experiment_services.environment_create(project=project, user=request.user, **data)
        )


@extend_schema_view(get=extend_schema(responses={200: s.EnvironmentSerializer, 404: NOT_FOUND}))
class EnvironmentDetailView(DefinitionDetailView):
    serializer_class = s.EnvironmentSerializer
    kind = ENVIRONMENTS

    @extend_schema(
        request=s.EnvironmentUpdateSerializer,
        responses={200: s.EnvironmentSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Edit an environment; a changed kind or config makes a new version",
    )
    def patch(self, request: Request, slug: str, pk: int) -> Response:
        environment = self.definition(Capability.LAUNCH)
        data = parse(s.EnvironmentUpdateSerializer, request.data)
        latest = environment.latest_version
        experiment_services.environment_update(
            environment=environment,
            user=request.user,
            kind=data.get("kind", latest.kind),
            config=data.get("config", latest.config),
            name=data.get("name"),
            description=data.get("description"),
            note=data["note"],
        )
        return self.get(request, slug, pk)


class EnvironmentVersionListView(DefinitionVersionListView):
    serializer_class = s.EnvironmentVersionSerializer
    kind = ENVIRONMENTS


_RUBRIC_META_FIELDS = ("name", "description", "note")


def _rubric_spec(body: dict[str, Any]) -> dict[str, Any]:
    """The rubric spec is the body less its name, description and note: every other key goes to the
    rubric service, which owns what a valid spec is (and rejects keys it does not know)."""
    return {key: value for key, value in body.items() if key not in _RUBRIC_META_FIELDS}


class RubricListView(DefinitionListView):
    serializer_class = s.RubricSerializer
    kind = RUBRICS

    @extend_schema(
        request=s.RubricInputSerializer,
        responses={201: s.RubricSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Create a rubric (version 1)",
    )
    def post(self, request: Request, slug: str) -> Response:
        project = access_project(request.user, slug, Capability.LAUNCH).project
        data = parse(s.RubricInputSerializer, request.data)
        rubric = experiment_services.rubric_create(
            project=project,
            user=request.user,
            name=data["name"],
            description=data["description"],
            spec=_rubric_spec(request.data),
        )
        return self.created(rubric)


@extend_schema_view(get=extend_schema(responses={200: s.RubricSerializer, 404: NOT_FOUND}))
class RubricDetailView(DefinitionDetailView):
    serializer_class = s.RubricSerializer
    kind = RUBRICS

    @extend_schema(
        request=s.RubricUpdateSerializer,
        responses={200: s.RubricSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Edit a rubric; a changed spec makes a new version",
    )
    def patch(self, request: Request, slug: str, pk: int) -> Response:
        rubric = self.definition(Capability.LAUNCH)
        data = parse(s.RubricUpdateSerializer, request.data)
        # Keys left out keep the latest version's values.
        spec = {**rubric.latest_version.spec, **_rubric_spec(request.data)}
        experiment_services.rubric_update(
            rubric=rubric,
            user=request.user,
            spec=spec,
            name=data.get("name"),
            description=data.get("description"),
            note=data["note"],
        )
        return self.get(request, slug, pk)


class RubricVersionListView(DefinitionVersionListView):
    serializer_class = s.RubricVersionSerializer
    kind = RUBRICS


class RubricJudgeCheckView(APIView):
    @extend_schema(
        request=s.JudgeCheckInputSerializer,
        responses={
            200: s.JudgeCheckSerializer(many=True),
            400: VALIDATION_ERROR,
            403: FORBIDDEN,
            404: NOT_FOUND,
        },
        summary="Check the rubric's LLM judges against a truth (an environment's verifier or a queue)",
    )
    def post(self, request: Request, slug: str, pk: int) -> Response:
        access = access_project(request.user, slug, Capability.LAUNCH)
        rubric = access_rubric(access, pk)
        data = parse(s.JudgeCheckInputSerializer, request.data)
        if "queue" in data:
            truth = {"queue": access_queue(access, data["queue"])}
        else:
            truth = {"environment_version": access_environment(access, data["environment"]).latest_version}
        checks = judge_check(spec=rubric.latest_version.spec, **truth)
        return Response(
            [
                {
                    "criterion": check.criterion,
                    "untrusted": check.untrusted,
                    "skipped": check.skipped,
                    "agreement": check.agreement.as_dict() if check.agreement is not None else None,
                }
                for check in checks
            ]
        )


# --- runs ---------------------------------------------------------------------------------------------


def _run(request: Request, pk: int, need: str = Capability.READ) -> Run:
    return access_run(request.user, pk, need, queryset=selectors.run_queryset())


def _knob_errors_as_overrides(exc: ValidationError) -> ValidationError:
    """The run service reports knob errors at `config.<knob>` (paths in the resolved config); in this
    API the knobs arrive in the body's `overrides`, so the paths should point there."""
    if not hasattr(exc, "error_dict"):
        return exc
    renamed: dict[str, list[str]] = {}
    for path, errors in exc.message_dict.items():
        if path == "config" or path.startswith("config."):
            path = "overrides" + path[len("config") :]
        renamed.setdefault(path, []).extend(errors)
    return ValidationError(renamed)


class ProjectRunListView(generics.ListAPIView):
    serializer_class = s.RunSerializer

    def get_queryset(self):
        project = access_project(self.request.user, self.kwargs["slug"], Capability.READ).project
        query = parse(s.RunFilterSerializer, self.request.query_params)
        return selectors.run_list(
            project=project,
            status=query.get("status"),
            search=query.get("q", ""),
            tag=query.get("tag", ""),
            sort=query["sort"],
        )

    @extend_schema(parameters=[s.RunFilterSerializer])
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=s.RunInputSerializer,
        responses={201: s.RunCreatedSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Create and queue a run; the reply carries its ingestion token, once",
    )
    def post(self, request: Request, slug: str) -> Response:
        project = access_project(request.user, slug, Capability.LAUNCH).project
        data = parse(s.RunInputSerializer, request.data)
        environment = Environment.objects.filter(project=project, pk=data.pop("environment")).first()
        rubric = Rubric.objects.filter(project=project, pk=data.pop("rubric")).first()
        errors = {}
        if environment is None:
            errors["environment"] = ["No such environment in this project."]
        if rubric is None:
            errors["rubric"] = ["No such rubric in this project."]
        checkpoint = None
        checkpoint_id = data.pop("from_checkpoint", None)
        if checkpoint_id is not None:
            checkpoint = Checkpoint.objects.filter(run__project=project, pk=checkpoint_id).first()
            if checkpoint is None:
                errors["from_checkpoint"] = ["No such checkpoint in this project."]
        if errors:
            raise ValidationError(errors)
        try:
            if checkpoint is not None:
                run, token = experiment_services.run_create_from_checkpoint(
                    checkpoint=checkpoint, environment=environment, rubric=rubric, user=request.user, **data
                )
            else:
                run, token = experiment_services.run_create(
                    project=project, environment=environment, rubric=rubric, user=request.user, **data
                )
        except ValidationError as exc:
            raise _knob_errors_as_overrides(exc) from None
        run = selectors.run_queryset().get(pk=run.pk)
        return secret_response(s.RunCreatedSerializer(run, context={"ingest_token": token}).data)


class DpoRunCreateView(APIView):
    @extend_schema(
        request=s.DpoRunInputSerializer,
        responses={201: s.RunCreatedSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Create and queue a DPO run on a preference dataset (trainers/recipes/dpo.py); the reply carries "
        "its ingestion token, once",
    )
    def post(self, request: Request, pk: int) -> Response:
        snapshot = access_snapshot(request.user, pk, Capability.LAUNCH)
        data = parse(s.DpoRunInputSerializer, request.data)
        checkpoint_id = data.get("from_checkpoint")
        run, token = experiment_services.run_create_dpo(
            project=snapshot.project,
            snapshot=snapshot,
            name=data["name"],
            params=data["config"],
            queue=data["queue"],
            user=request.user,
            start_from=selectors.startable_checkpoint(project=snapshot.project, checkpoint_id=checkpoint_id),
            start_from_given=checkpoint_id is not None,
        )
        run = selectors.run_queryset().get(pk=run.pk)
        return secret_response(s.RunCreatedSerializer(run, context={"ingest_token": token}).data)


class RunDetailView(APIView):
    @extend_schema(responses={200: s.RunDetailSerializer, 404: NOT_FOUND})
    def get(self, request: Request, pk: int) -> Response:
        return Response(s.RunDetailSerializer(_run(request, pk)).data)

    @extend_schema(
        request=s.RunUpdateSerializer,
        responses={200: s.RunDetailSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Set a run's tags and/or note (nothing else about a run is edited)",
    )
    def patch(self, request: Request, pk: int) -> Response:
        run = _run(request, pk, Capability.LAUNCH)
        data = parse(s.RunUpdateSerializer, request.data)
        experiment_services.run_annotate(run=run, tags=data.get("tags"), note=data.get("note"))
        return Response(s.RunDetailSerializer(_run(request, pk)).data)

    @extend_schema(
        request=None,
        responses=DELETED,
        summary="Delete a finished run and everything it recorded (its launcher or the project's owner)",
    )
    def delete(self, request: Request, pk: int) -> Response:
        run = access_run_to_delete(request.user, pk, queryset=selectors.run_queryset())
        run_delete(run=run, user=request.user)
        return Response({"deleted": run.pk, "detail": DELETED_IN_BACKGROUND}, status=202)


class RunCancelView(APIView):
    @extend_schema(
        request=None,
        responses={200: s.RunCancelSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Cancel a run: a queued run at once, a running one within seconds (an external one at its next report)",
    )
    def post(self, request: Request, pk: int) -> Response:
        run = _run(request, pk, Capability.LAUNCH)
        result = experiment_services.run_request_cancel(run=run, user=request.user)
        run = selectors.run_queryset().get(pk=run.pk)
        return Response({"result": result, "run": s.RunDetailSerializer(run).data})


def _checkpoint(run: Run, checkpoint_id: int | None):
    if checkpoint_id is None:
        return None
    checkpoint = run.checkpoints.filter(pk=checkpoint_id, deleted=False).first()
    if checkpoint is None:
        raise ValidationError({"checkpoint": ["No such kept checkpoint of this run."]})
    return checkpoint


class RunResumeView(APIView):
    @extend_schema(
        request=s.RunContinueInputSerializer,
        responses={201: s.RunCreatedSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Resume a stopped run from a checkpoint as a new linked run (same config)",
    )
    def post(self, request: Request, pk: int) -> Response:
        run = _run(request, pk, Capability.LAUNCH)
        data = parse(
            s.RunContinueInputSerializer, request.data if request.body else {}
        )  # the body is optional
        resumed, token = experiment_services.run_resume(
            run=run, user=request.user, checkpoint=_checkpoint(run, data.get("checkpoint"))
        )
        resumed = selectors.run_queryset().get(pk=resumed.pk)
        return secret_response(s.RunCreatedSerializer(resumed, context={"ingest_token": token}).data)


class RunForkView(APIView):
    @extend_schema(
        request=s.RunForkInputSerializer,
        responses={201: s.RunCreatedSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Fork a stopped run from a checkpoint with other knobs, as a new linked run",
    )
    def post(self, request: Request, pk: int) -> Response:
        run = _run(request, pk, Capability.LAUNCH)
        data = parse(s.RunForkInputSerializer, request.data)
        try:
            fork, token = experiment_services.run_fork(
                run=run,
                user=request.user,
                checkpoint=_checkpoint(run, data.get("checkpoint")),
                name=data.get("name", ""),
                overrides=data.get("overrides", run.overrides),
            )
        except ValidationError as exc:
            raise _knob_errors_as_overrides(exc) from None
        fork = selectors.run_queryset().get(pk=fork.pk)
        return secret_response(s.RunCreatedSerializer(fork, context={"ingest_token": token}).data)


class RunCheckpointListView(generics.ListAPIView):
    serializer_class = s.CheckpointSerializer

    def get_queryset(self):
        run = _run(self.request, self.kwargs["pk"])
        self.show_paths = can(self.request.user, run.project, Capability.LAUNCH)
        return rollout_selectors.checkpoint_list(run=run)

    def get_serializer_context(self) -> dict[str, Any]:
        # Server paths only for those who can use them (who may launch); viewers get null.
        return {**super().get_serializer_context(), "show_paths": getattr(self, "show_paths", False)}


class CheckpointWeightsView(APIView):
    content_negotiation_class = DownloadNegotiation

    @extend_schema(
        parameters=[s.CheckpointWeightsQuerySerializer],
        responses={
            (200, "application/octet-stream"): OpenApiResponse(
                OpenApiTypes.BINARY, description="the weights file (safetensors), streamed"
            ),
            (200, "application/x-tar"): OpenApiResponse(
                OpenApiTypes.BINARY, description="file=model.tar: the model directory as one tar, streamed"
            ),
            400: VALIDATION_ERROR,
            404: NOT_FOUND,
        },
        summary="Download a checkpoint's weights as safetensors",
    )
    def get(self, request: Request, pk: int, checkpoint_id: int) -> HttpResponseBase:
        checkpoint = access_checkpoint(request.user, checkpoint_id, Capability.READ)
        if checkpoint.run_id != pk:
            raise Http404("No such checkpoint of this run.")
        run = checkpoint.run
        files = checkpoint.weight_files()
        if not files:
            raise Http404(
                "This checkpoint was pruned."
                if checkpoint.deleted
                else "This checkpoint's files are not on this server."
            )
        chosen = parse(s.CheckpointWeightsQuerySerializer, request.query_params).get("file") or ""
        if chosen == MODEL_ARCHIVE:
            return _model_archive(checkpoint)
        name = chosen or checkpoint.default_weight_file()
        if name is None:
            raise ValidationError(
                {"file": [f"This checkpoint has {len(files)} weight files; choose one: {', '.join(files)}."]}
            )
        if name not in files:
            raise ValidationError({"file": [f"Choose one of: {', '.join(files)}, or {MODEL_ARCHIVE}."]})
        filename = f"{run.name}-step{checkpoint.step}-{name.replace('/', '-')}"
        return FileResponse(
            open(Path(checkpoint.path) / name, "rb"),  # noqa: SIM115 (FileResponse closes it)
            as_attachment=True,
            filename=filename,
            content_type="application/octet-stream",
        )


MODEL_ARCHIVE = "model.tar"


def _model_archive(checkpoint: Checkpoint) -> StreamingHttpResponse:
    """The checkpoint's model (`Checkpoint.model_files`) as one uncompressed tar under a folder named after
    the run and step, streamed a MiB at a time (never held in memory: the weights are hundreds of MB)."""
    import re
    import tarfile

    names = checkpoint.model_files()
    if not names:
        raise Http404("This checkpoint has no model directory on this server.")
    root = Path(checkpoint.path)
    folder = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{checkpoint.run.name}-step{checkpoint.step}").strip("-")

    def blocks():
        for name in names:
            path = root / name
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size, info.mode, info.mtime = path.stat().st_size, 0o644, int(path.stat().st_mtime)
            yield info.tobuf(format=tarfile.PAX_FORMAT)
            with path.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    yield chunk
            if info.size % tarfile.BLOCKSIZE:
                yield b"\0" * (tarfile.BLOCKSIZE - info.size % tarfile.BLOCKSIZE)
        yield b"\0" * (2 * tarfile.BLOCKSIZE)  # the end-of-archive marker

    response = StreamingHttpResponse(blocks(), content_type="application/x-tar")
    response["Content-Disposition"] = f'attachment; filename="{folder}.tar"'
    return response


class RunEventLogView(APIView):
    content_negotiation_class = DownloadNegotiation

    @extend_schema(
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(
                OpenApiTypes.STR, description="one JSON object per accepted event, oldest first"
            ),
            404: NOT_FOUND,
        },
        summary="Download the run's event log as JSON lines",
    )
    def get(self, request: Request, pk: int) -> HttpResponseBase:
        run = _run(request, pk)
        response = StreamingHttpResponse(
            rollout_selectors.run_event_lines(run=run), content_type="application/x-ndjson"
        )
        response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-events.jsonl"'
        return response


# --- registries ---------------------------------------------------------------------------------------


def _kinds(kinds: dict[str, KindSpec]) -> list[dict[str, Any]]:
    return [
        {
            "name": k.name,
            "title": k.title,
            "description": k.description,
            "config_schema": k.config_schema,
            "needs_model": k.needs_model,
        }
        for k in sorted(kinds.values(), key=lambda k: k.name)
    ]


class EnvironmentKindListView(APIView):
    @extend_schema(
        responses=s.KindSerializer(many=True), summary="Registered environment kinds and their config schemas"
    )
    def get(self, request: Request) -> Response:
        return Response(s.KindSerializer(_kinds(environment_kinds()), many=True).data)


class CriterionKindListView(APIView):
    @extend_schema(
        responses=s.KindSerializer(many=True),
        summary="Registered rubric criterion kinds and their params schemas",
    )
    def get(self, request: Request) -> Response:
        return Response(s.KindSerializer(_kinds(criterion_kinds()), many=True).data)


class PresetListView(APIView):
    @extend_schema(
        responses=s.PresetsSerializer, summary="Algorithm presets, the run config schema and defaults"
    )
    def get(self, request: Request) -> Response:
        body = {
            "presets": [
                {
                    "name": name,
                    "title": PRESET_TITLES.get(name, name),
                    "knobs": knobs,
                    "resolved": resolve_run_config(name, {}),
                }
                for name, knobs in PRESETS.items()
            ],
            "schema": RUN_CONFIG_SCHEMA,
            "groups": KNOB_GROUPS,
            "defaults": default_run_config(),
        }
        return Response(s.PresetsSerializer(body).data)


class PartListView(APIView):
    @extend_schema(
        parameters=[s.PartFilterSerializer],
        responses=OpenApiTypes.OBJECT,
        summary="Training parts the online workers have (of ?queue=), with docstrings and option schemas",
    )
    def get(self, request: Request) -> Response:
        queue = parse(s.PartFilterSerializer, request.query_params).get("queue") or None
        catalogue, where = worker_parts(queue)
        grouped = parts_by_kind(catalogue)
        return Response({"queue": queue, "where": where, "knobs": PART_KNOBS, "parts": grouped})
