"""The JSON API. Thin views: resolve objects through `webapp.projects.access`, write through the
services, read through the selectors, shape output with the serializers.

Capabilities by endpoint: reading anything in a project needs `read` (every member); creating or
editing environments, rubrics and runs, and cancelling runs, needs `launch` (researcher, owner);
changing members needs `manage` (owner). Outsiders get 404, members without the capability 403.
Review follows the review pages: comments and tags are read with `read` and written with `annotate`;
preference queues need `annotate` (annotators see only the queues they are assigned to, others are
404); datasets (snapshots and their exports) and agreement need `launch`.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.negotiation import BaseContentNegotiation
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
from trainers.registry import KindSpec, criterion_kinds, environment_kinds
from webapp.accounts import services as account_services
from webapp.accounts.models import ApiToken
from webapp.api import selectors
from webapp.api import serializers as s
from webapp.experiments import services as experiment_services
from webapp.experiments.models import Environment, Rubric, Run
from webapp.projects import services as project_services
from webapp.projects.access import (
    NotFound,
    ProjectAccess,
    access_object,
    access_project,
    access_project_by_id,
)
from webapp.projects.models import Membership, Project
from webapp.projects.selectors import membership_list
from webapp.review import agreement, exports
from webapp.review import selectors as review_selectors
from webapp.review import services as review_services
from webapp.review.models import PreferenceQueue
from webapp.rollouts import selectors as rollout_selectors
from webapp.rollouts.models import Trajectory

READ, ANNOTATE, LAUNCH, MANAGE = "read", "annotate", "launch", "manage"

VALIDATION_ERROR = OpenApiResponse(s.ValidationErrorSerializer, description="invalid fields, by dotted path")
NOT_FOUND = OpenApiResponse(s.ErrorSerializer, description="no such object, or you are not a member of its project")
FORBIDDEN = OpenApiResponse(s.ErrorSerializer, description="your role does not allow this")


def parse(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """Coerce a request body (or query) to the documented types; errors come back by field name."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _project_detail(user, project: Project) -> Project:
    """The project with the counts and role annotations the project serializers read."""
    return selectors.project_list_with_role(user).get(pk=project.pk)


# --- projects -----------------------------------------------------------------------------------------


class ProjectListView(generics.ListAPIView):
    serializer_class = s.ProjectSerializer

    def get_queryset(self):
        return selectors.project_list_with_role(self.request.user)

    @extend_schema(request=s.ProjectInputSerializer, responses={201: s.ProjectDetailSerializer, 400: VALIDATION_ERROR},
                   summary="Create a project (you become its owner)")
    def post(self, request: Request) -> Response:
        data = parse(s.ProjectInputSerializer, request.data)
        project = project_services.project_create(owner=request.user, **data)
        return Response(s.ProjectDetailSerializer(_project_detail(request.user, project)).data, status=201)


class ProjectDetailView(APIView):
    @extend_schema(responses={200: s.ProjectDetailSerializer, 404: NOT_FOUND})
    def get(self, request: Request, slug: str) -> Response:
        access = access_project(request.user, slug, READ)
        return Response(s.ProjectDetailSerializer(_project_detail(request.user, access.project)).data)


# --- members ------------------------------------------------------------------------------------------


class MemberListView(generics.ListAPIView):
    serializer_class = s.MembershipSerializer

    def get_queryset(self):
        return membership_list(access_project(self.request.user, self.kwargs["slug"], READ).project)

    @extend_schema(request=s.MemberInputSerializer,
                   responses={201: s.MembershipSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Add a member, or change the role of an existing one (owners only)")
    def post(self, request: Request, slug: str) -> Response:
        access = access_project(request.user, slug, MANAGE)
        data = parse(s.MemberInputSerializer, request.data)
        membership = project_services.membership_set(project=access.project, **data)
        return Response(s.MembershipSerializer(membership).data, status=201)


class MemberDetailView(APIView):
    def _membership(self, request: Request, slug: str, pk: int) -> tuple[ProjectAccess, Membership]:
        access = access_project(request.user, slug, MANAGE)
        membership = membership_list(access.project).filter(pk=pk).first()
        if membership is None:
            raise NotFound("No such member.")
        return access, membership

    @extend_schema(request=s.MemberUpdateSerializer,
                   responses={200: s.MembershipSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Change a member's role (owners only; a project keeps at least one owner)")
    def patch(self, request: Request, slug: str, pk: int) -> Response:
        access, membership = self._membership(request, slug, pk)
        data = parse(s.MemberUpdateSerializer, request.data)
        updated = project_services.membership_set(
            project=access.project, username=membership.user.username, role=data["role"]
        )
        return Response(s.MembershipSerializer(updated).data)

    @extend_schema(responses={204: None, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Remove a member (owners only; a project keeps at least one owner)")
    def delete(self, request: Request, slug: str, pk: int) -> Response:
        access, membership = self._membership(request, slug, pk)
        project_services.membership_remove(project=access.project, membership_id=membership.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- environments -------------------------------------------------------------------------------------


def _environment(request: Request, slug: str, pk: int, need: str) -> Environment:
    project = access_project(request.user, slug, need).project
    environment = selectors.environment_list(project=project).filter(pk=pk).first()
    if environment is None:
        raise NotFound("No such environment.")
    return environment


class EnvironmentListView(generics.ListAPIView):
    serializer_class = s.EnvironmentSerializer

    def get_queryset(self):
        return selectors.environment_list(project=access_project(self.request.user, self.kwargs["slug"], READ).project)

    @extend_schema(request=s.EnvironmentInputSerializer,
                   responses={201: s.EnvironmentSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Create an environment (version 1)")
    def post(self, request: Request, slug: str) -> Response:
        project = access_project(request.user, slug, LAUNCH).project
        data = parse(s.EnvironmentInputSerializer, request.data)
        environment = experiment_services.environment_create(project=project, user=request.user, **data)
        return Response(s.EnvironmentSerializer(environment).data, status=201)


class EnvironmentDetailView(APIView):
    @extend_schema(responses={200: s.EnvironmentSerializer, 404: NOT_FOUND})
    def get(self, request: Request, slug: str, pk: int) -> Response:
        return Response(s.EnvironmentSerializer(_environment(request, slug, pk, READ)).data)

    @extend_schema(request=s.EnvironmentUpdateSerializer,
                   responses={200: s.EnvironmentSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Edit an environment; a changed kind or config makes a new version")
    def patch(self, request: Request, slug: str, pk: int) -> Response:
        environment = _environment(request, slug, pk, LAUNCH)
        data = parse(s.EnvironmentUpdateSerializer, request.data)
        latest = environment.versions_desc[0]
        experiment_services.environment_update(
            environment=environment,
            user=request.user,
            kind=data.get("kind", latest.kind),
            config=data.get("config", latest.config),
            name=data.get("name"),
            description=data.get("description"),
            note=data["note"],
        )
        return Response(s.EnvironmentSerializer(_environment(request, slug, pk, READ)).data)


class EnvironmentVersionListView(generics.ListAPIView):
    serializer_class = s.EnvironmentVersionSerializer

    def get_queryset(self):
        environment = _environment(self.request, self.kwargs["slug"], self.kwargs["pk"], READ)
        return selectors.environment_versions(environment=environment)


# --- rubrics ------------------------------------------------------------------------------------------

_RUBRIC_META_FIELDS = ("name", "description", "note")


def _rubric(request: Request, slug: str, pk: int, need: str) -> Rubric:
    project = access_project(request.user, slug, need).project
    rubric = selectors.rubric_list(project=project).filter(pk=pk).first()
    if rubric is None:
        raise NotFound("No such rubric.")
    return rubric


def _rubric_spec(body: dict[str, Any]) -> dict[str, Any]:
    """The rubric spec is the body less its name, description and note: every other key goes to the
    rubric service, which owns what a valid spec is (and rejects keys it does not know)."""
    return {key: value for key, value in body.items() if key not in _RUBRIC_META_FIELDS}


class RubricListView(generics.ListAPIView):
    serializer_class = s.RubricSerializer

    def get_queryset(self):
        return selectors.rubric_list(project=access_project(self.request.user, self.kwargs["slug"], READ).project)

    @extend_schema(request=s.RubricInputSerializer,
                   responses={201: s.RubricSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Create a rubric (version 1)")
    def post(self, request: Request, slug: str) -> Response:
        project = access_project(request.user, slug, LAUNCH).project
        data = parse(s.RubricInputSerializer, request.data)
        rubric = experiment_services.rubric_create(
            project=project,
            user=request.user,
            name=data["name"],
            description=data["description"],
            spec=_rubric_spec(request.data),
        )
        return Response(s.RubricSerializer(rubric).data, status=201)


class RubricDetailView(APIView):
    @extend_schema(responses={200: s.RubricSerializer, 404: NOT_FOUND})
    def get(self, request: Request, slug: str, pk: int) -> Response:
        return Response(s.RubricSerializer(_rubric(request, slug, pk, READ)).data)

    @extend_schema(request=s.RubricUpdateSerializer,
                   responses={200: s.RubricSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Edit a rubric; a changed spec makes a new version")
    def patch(self, request: Request, slug: str, pk: int) -> Response:
        rubric = _rubric(request, slug, pk, LAUNCH)
        data = parse(s.RubricUpdateSerializer, request.data)
        # Keys left out keep the latest version's values.
        spec = {**rubric.versions_desc[0].spec, **_rubric_spec(request.data)}
        experiment_services.rubric_update(
            rubric=rubric,
            user=request.user,
            spec=spec,
            name=data.get("name"),
            description=data.get("description"),
            note=data["note"],
        )
        return Response(s.RubricSerializer(_rubric(request, slug, pk, READ)).data)


class RubricVersionListView(generics.ListAPIView):
    serializer_class = s.RubricVersionSerializer

    def get_queryset(self):
        rubric = _rubric(self.request, self.kwargs["slug"], self.kwargs["pk"], READ)
        return selectors.rubric_versions(rubric=rubric)


# --- runs ---------------------------------------------------------------------------------------------


def _run(request: Request, pk: int, need: str = READ) -> Run:
    return access_object(request.user, selectors.run_queryset(), need, pk=pk)


def _knob_errors_as_overrides(exc: ValidationError) -> ValidationError:
    """The run service reports knob errors at `config.<knob>` (paths in the resolved config); in this
    API the knobs arrive in the body's `overrides`, so the paths should point there."""
    if not hasattr(exc, "error_dict"):
        return exc
    renamed: dict[str, list[str]] = {}
    for path, errors in exc.message_dict.items():
        if path == "config" or path.startswith("config."):
            path = "overrides" + path[len("config"):]
        renamed.setdefault(path, []).extend(errors)
    return ValidationError(renamed)


class ProjectRunListView(generics.ListAPIView):
    serializer_class = s.RunSerializer

    def get_queryset(self):
        project = access_project(self.request.user, self.kwargs["slug"], READ).project
        query = parse(s.RunFilterSerializer, self.request.query_params)
        return selectors.run_list(project=project, status=query.get("status"))

    @extend_schema(parameters=[s.RunFilterSerializer])
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(request=s.RunInputSerializer,
                   responses={201: s.RunCreatedSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Create and queue a run; the reply carries its ingestion token, once")
    def post(self, request: Request, slug: str) -> Response:
        project = access_project(request.user, slug, LAUNCH).project
        data = parse(s.RunInputSerializer, request.data)
        environment = Environment.objects.filter(project=project, pk=data.pop("environment")).first()
        rubric = Rubric.objects.filter(project=project, pk=data.pop("rubric")).first()
        errors = {}
        if environment is None:
            errors["environment"] = ["No such environment in this project."]
        if rubric is None:
            errors["rubric"] = ["No such rubric in this project."]
        if errors:
            raise ValidationError(errors)
        try:
            run, token = experiment_services.run_create(
                project=project, environment=environment, rubric=rubric, user=request.user, **data
            )
        except ValidationError as exc:
            raise _knob_errors_as_overrides(exc) from None
        run = selectors.run_queryset().get(pk=run.pk)
        return Response(s.RunCreatedSerializer(run, context={"ingest_token": token}).data, status=201)


class RunDetailView(APIView):
    @extend_schema(responses={200: s.RunDetailSerializer, 404: NOT_FOUND})
    def get(self, request: Request, pk: int) -> Response:
        return Response(s.RunDetailSerializer(_run(request, pk)).data)


class RunCancelView(APIView):
    @extend_schema(request=None,
                   responses={200: s.RunCancelSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Cancel a run: a queued run at once, a running one at the trainer's next report")
    def post(self, request: Request, pk: int) -> Response:
        run = _run(request, pk, LAUNCH)
        result = experiment_services.run_request_cancel(run=run)
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
    @extend_schema(request=s.RunContinueInputSerializer,
                   responses={201: s.RunCreatedSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Resume a stopped run from a checkpoint as a new linked run (same config)")
    def post(self, request: Request, pk: int) -> Response:
        run = _run(request, pk, LAUNCH)
        data = parse(s.RunContinueInputSerializer, request.data if request.body else {})  # the body is optional
        resumed, token = experiment_services.run_resume(
            run=run, user=request.user, checkpoint=_checkpoint(run, data.get("checkpoint"))
        )
        resumed = selectors.run_queryset().get(pk=resumed.pk)
        return Response(s.RunCreatedSerializer(resumed, context={"ingest_token": token}).data, status=201)


class RunForkView(APIView):
    @extend_schema(request=s.RunForkInputSerializer,
                   responses={201: s.RunCreatedSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Fork a stopped run from a checkpoint with other knobs, as a new linked run")
    def post(self, request: Request, pk: int) -> Response:
        run = _run(request, pk, LAUNCH)
        data = parse(s.RunForkInputSerializer, request.data)
        try:
            fork, token = experiment_services.run_fork(
                run=run, user=request.user, checkpoint=_checkpoint(run, data.get("checkpoint")),
                name=data.get("name", ""), overrides=data.get("overrides", run.overrides),
            )
        except ValidationError as exc:
            raise _knob_errors_as_overrides(exc) from None
        fork = selectors.run_queryset().get(pk=fork.pk)
        return Response(s.RunCreatedSerializer(fork, context={"ingest_token": token}).data, status=201)


class RunCheckpointListView(generics.ListAPIView):
    serializer_class = s.CheckpointSerializer

    def get_queryset(self):
        return rollout_selectors.checkpoint_list(run=_run(self.request, self.kwargs["pk"]))


class RunTrajectoryListView(generics.ListAPIView):
    serializer_class = s.TrajectorySerializer

    def get_queryset(self):
        run = _run(self.request, self.kwargs["pk"])
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
    @extend_schema(parameters=[s.TrajectoryDetailQuerySerializer],
                   responses={200: s.TrajectoryDetailSerializer, 404: NOT_FOUND})
    def get(self, request: Request, pk: int, trajectory_id: int) -> Response:
        run = _run(request, pk)
        query = parse(s.TrajectoryDetailQuerySerializer, request.query_params)
        trajectory = rollout_selectors.trajectory_get(run=run, trajectory_id=trajectory_id)
        if trajectory is None:
            raise NotFound("No such trajectory in this run.")
        return Response(s.TrajectoryDetailSerializer(trajectory, context=query).data)


class RunMetricsView(APIView):
    @extend_schema(parameters=[s.MetricsQuerySerializer], responses={200: s.MetricsSerializer, 404: NOT_FOUND},
                   summary="Per-key metric series, downsampled on the server when long")
    def get(self, request: Request, pk: int) -> Response:
        run = _run(request, pk)
        query = parse(s.MetricsQuerySerializer, request.query_params)
        keys = [k.strip() for k in query["keys"].split(",") if k.strip()] if "keys" in query else None
        series = rollout_selectors.metric_series(run=run, keys=keys, max_points=query["max_points"])
        body = {
            "run": run.pk,
            "keys": rollout_selectors.metric_keys(run=run),
            "series": {key: vars(one) for key, one in series.items()},
        }
        return Response(s.MetricsSerializer(body).data)


# --- review: comments and tags on a trajectory ----------------------------------------------------------


def _trajectory(request: Request, pk: int, need: str) -> Trajectory:
    return access_object(request.user, selectors.trajectory_queryset(), need, pk=pk)


class TrajectoryCommentListView(generics.ListAPIView):
    serializer_class = s.CommentSerializer

    def get_queryset(self):
        return review_selectors.comment_list(_trajectory(self.request, self.kwargs["pk"], READ))

    @extend_schema(request=s.CommentInputSerializer,
                   responses={201: s.CommentSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Comment on a trajectory, or on one of its turns; @username notifies that member")
    def post(self, request: Request, pk: int) -> Response:
        trajectory = _trajectory(request, pk, ANNOTATE)
        data = parse(s.CommentInputSerializer, request.data)
        comment = review_services.comment_create(
            trajectory=trajectory, author=request.user, body=data["body"], turn_index=data.get("turn_index")
        )
        return Response(s.CommentSerializer(comment).data, status=201)


class TrajectoryTagListView(generics.ListAPIView):
    serializer_class = s.TrajectoryTagSerializer

    def get_queryset(self):
        return review_selectors.trajectory_tag_list(_trajectory(self.request, self.kwargs["pk"], READ))

    @extend_schema(request=s.TagInputSerializer,
                   responses={201: s.TrajectoryTagSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Tag a trajectory (the project's tag of that name is created on first use)")
    def post(self, request: Request, pk: int) -> Response:
        trajectory = _trajectory(request, pk, ANNOTATE)
        data = parse(s.TagInputSerializer, request.data)
        link = review_services.tag_add(trajectory=trajectory, user=request.user, name=data["name"])
        return Response(s.TrajectoryTagSerializer(link).data, status=201)


class TrajectoryTagDetailView(APIView):
    @extend_schema(responses={204: None, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Remove a tag from a trajectory (the name is matched ignoring case)")
    def delete(self, request: Request, pk: int, name: str) -> Response:
        trajectory = _trajectory(request, pk, ANNOTATE)
        link = review_selectors.trajectory_tag_named(trajectory, name)
        if link is None:
            raise NotFound("This trajectory has no such tag.")
        review_services.tag_remove(trajectory=trajectory, user=request.user, tag=link.tag)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- review: preference queues and their datasets ---------------------------------------------------------


def _queue(request: Request, pk: int, need: str) -> tuple[ProjectAccess, PreferenceQueue]:
    queue = selectors.preference_queue_queryset().filter(pk=pk).first()
    if queue is None:
        raise NotFound("No such preference queue.")
    access = access_project_by_id(request.user, queue.project_id, need)
    if not review_selectors.queue_visible(queue, user=request.user, role=access.role):
        raise NotFound("No such preference queue.")  # annotators do not learn that other queues exist
    return access, queue


class PreferenceQueueListView(generics.ListAPIView):
    serializer_class = s.PreferenceQueueSerializer

    def get_queryset(self):
        access = access_project(self.request.user, self.kwargs["slug"], ANNOTATE)
        return review_selectors.queue_list(project=access.project, user=self.request.user, role=access.role)


class PreferenceQueueDetailView(APIView):
    @extend_schema(responses={200: s.PreferenceQueueDetailSerializer, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="A preference queue with its progress; agreement for researchers and owners")
    def get(self, request: Request, pk: int) -> Response:
        access, queue = _queue(request, pk, ANNOTATE)
        summary = None
        if access.can(LAUNCH):  # as on the queue page: annotators see progress, not each other's votes
            summary = agreement.summarize(review_selectors.queue_judgements(queue), overlap=queue.overlap,
                                          judge_scores=review_selectors.judge_components(queue))
        context = {
            "progress": review_selectors.queue_progress(queue),
            "agreement": summary,
            "may_annotate": review_selectors.may_annotate(queue, user=request.user, role=access.role),
        }
        return Response(s.PreferenceQueueDetailSerializer(queue, context=context).data)


class PreferenceSnapshotListView(generics.ListAPIView):
    serializer_class = s.PreferenceSnapshotSerializer

    def get_queryset(self):
        _access, queue = _queue(self.request, self.kwargs["pk"], LAUNCH)
        return review_selectors.snapshot_list(queue)

    @extend_schema(request=s.SnapshotInputSerializer,
                   responses={201: s.PreferenceSnapshotSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
                   summary="Freeze the queue's judgements into the next version of its preference dataset")
    def post(self, request: Request, pk: int) -> Response:
        _access, queue = _queue(request, pk, LAUNCH)
        data = parse(s.SnapshotInputSerializer, request.data if request.body else {})  # the body is optional
        snapshot = review_services.snapshot_create(queue, request.user, complete_only=data["complete_only"])
        snapshot = review_selectors.snapshot_list(queue).get(pk=snapshot.pk)
        return Response(s.PreferenceSnapshotSerializer(snapshot).data, status=201)


class _FileFormatQuery(BaseContentNegotiation):
    """`?format=` on the export names the file's format, not a DRF renderer (its URL_FORMAT_OVERRIDE),
    and an `Accept` header does not matter: errors are JSON, a download is the file."""

    def select_parser(self, request, parsers):
        return parsers[0]

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class PreferenceSnapshotExportView(APIView):
    content_negotiation_class = _FileFormatQuery

    @extend_schema(
        parameters=[s.SnapshotExportQuerySerializer],
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(OpenApiTypes.STR, description="the dataset file"),
            (200, "application/vnd.apache.parquet"): OpenApiResponse(OpenApiTypes.BINARY, description="the dataset file"),
            400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND,
        },
        summary="Download a preference dataset as DPO JSON lines or parquet",
    )
    def get(self, request: Request, pk: int) -> HttpResponse:
        snapshot = access_object(request.user, selectors.preference_snapshot_queryset(), LAUNCH, pk=pk)
        query = parse(s.SnapshotExportQuerySerializer, request.query_params)
        return exports.download_response(snapshot, query["format"])


# --- registries ---------------------------------------------------------------------------------------


def _kinds(kinds: dict[str, KindSpec]) -> list[dict[str, Any]]:
    return [
        {"name": k.name, "title": k.title, "description": k.description, "config_schema": k.config_schema,
         "needs_model": k.needs_model}
        for k in sorted(kinds.values(), key=lambda k: k.name)
    ]


class EnvironmentKindListView(APIView):
    @extend_schema(responses=s.KindSerializer(many=True), summary="Registered environment kinds and their config schemas")
    def get(self, request: Request) -> Response:
        return Response(s.KindSerializer(_kinds(environment_kinds()), many=True).data)


class CriterionKindListView(APIView):
    @extend_schema(responses=s.KindSerializer(many=True), summary="Registered rubric criterion kinds and their params schemas")
    def get(self, request: Request) -> Response:
        return Response(s.KindSerializer(_kinds(criterion_kinds()), many=True).data)


class PresetListView(APIView):
    @extend_schema(responses=s.PresetsSerializer, summary="Algorithm presets, the run config schema and defaults")
    def get(self, request: Request) -> Response:
        body = {
            "presets": [
                {"name": name, "title": PRESET_TITLES.get(name, name), "knobs": knobs,
                 "resolved": resolve_run_config(name, {})}
                for name, knobs in PRESETS.items()
            ],
            "schema": RUN_CONFIG_SCHEMA,
            "groups": KNOB_GROUPS,
            "defaults": default_run_config(),
        }
        return Response(s.PresetsSerializer(body).data)


# --- tokens -------------------------------------------------------------------------------------------


class TokenListView(generics.ListAPIView):
    serializer_class = s.ApiTokenSerializer

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user).order_by("-created_at", "-id")

    @extend_schema(request=s.ApiTokenInputSerializer, responses={201: s.ApiTokenCreatedSerializer, 400: VALIDATION_ERROR},
                   summary="Create a personal API token; the reply carries it, once")
    def post(self, request: Request) -> Response:
        data = parse(s.ApiTokenInputSerializer, request.data)
        token, raw = account_services.api_token_create(user=request.user, name=data["name"])
        return Response(s.ApiTokenCreatedSerializer(token, context={"raw_token": raw}).data, status=201)


class TokenDetailView(APIView):
    @extend_schema(responses={204: None, 404: NOT_FOUND}, summary="Revoke one of your tokens")
    def delete(self, request: Request, pk: int) -> Response:
        if not ApiToken.objects.filter(pk=pk, user=request.user, revoked_at=None).exists():
            raise NotFound("No such active token.")
        account_services.api_token_revoke(user=request.user, token_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
