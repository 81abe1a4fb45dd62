"""The JSON API of review: thin views that resolve objects through `webapp.projects.access`, write
through the services, read through the selectors and shape output with the serializers (docs/api.md)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.api.base import FORBIDDEN, NOT_FOUND, VALIDATION_ERROR, DownloadNegotiation, parse
from webapp.projects.access import (
    Capability,
    NotFound,
    ProjectAccess,
    access_comment,
    access_project,
    access_project_by_id,
    access_queue,
    access_snapshot,
    access_trajectory,
)
from webapp.review import exports, selectors
from webapp.review import serializers as s
from webapp.review import services as review_services
from webapp.review.models import PreferencePair, PreferenceQueue, QueueJudge
from webapp.rewards.apis import JobCancelSerializer
from webapp.rollouts.models import Trajectory
from webapp.rollouts.selectors import runs as rollout_selectors

# --- review: comments and tags on a trajectory ----------------------------------------------------------


def _trajectory(request: Request, pk: int, need: str) -> Trajectory:
    return access_trajectory(request.user, pk, need, queryset=rollout_selectors.trajectory_queryset())


class TrajectoryCommentListView(generics.ListAPIView):
    serializer_class = s.CommentSerializer

    def get_queryset(self):
        return selectors.comment_list(_trajectory(self.request, self.kwargs["pk"], Capability.READ))

    @extend_schema(
        request=s.CommentInputSerializer,
        responses={201: s.CommentSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Comment on a trajectory, on one of its turns, or reply in a thread; @username notifies",
    )
    def post(self, request: Request, pk: int) -> Response:
        trajectory = _trajectory(request, pk, Capability.ANNOTATE)
        data = parse(s.CommentInputSerializer, request.data)
        reply_to = data.get("reply_to")
        comment = review_services.comment_create(
            trajectory=trajectory,
            author=request.user,
            body=data["body"],
            turn_index=data.get("turn_index"),
            reply_to=access_comment(request.user, reply_to) if reply_to is not None else None,
        )
        return Response(s.CommentSerializer(comment).data, status=201)


class CommentThreadResolveView(APIView):
    @extend_schema(
        request=s.ThreadResolveSerializer,
        responses={200: s.CommentSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Resolve (or reopen) a comment's thread: its author, a researcher or an owner",
    )
    def post(self, request: Request, pk: int) -> Response:
        comment = access_comment(request.user, pk, Capability.ANNOTATE)
        data = parse(s.ThreadResolveSerializer, request.data)
        root = review_services.comment_thread_resolve(
            comment=comment, user=request.user, resolved=data["resolved"]
        )
        return Response(s.CommentSerializer(root).data)


class TrajectoryTagListView(generics.ListAPIView):
    serializer_class = s.TrajectoryTagSerializer

    def get_queryset(self):
        return selectors.trajectory_tag_list(_trajectory(self.request, self.kwargs["pk"], Capability.READ))

    @extend_schema(
        request=s.TagInputSerializer,
        responses={201: s.TrajectoryTagSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Tag a trajectory (the project's tag of that name is created on first use)",
    )
    def post(self, request: Request, pk: int) -> Response:
        trajectory = _trajectory(request, pk, Capability.ANNOTATE)
        data = parse(s.TagInputSerializer, request.data)
        link = review_services.tag_add(trajectory=trajectory, user=request.user, name=data["name"])
        return Response(s.TrajectoryTagSerializer(link).data, status=201)


class TrajectoryTagDetailView(APIView):
    @extend_schema(
        responses={204: None, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Remove a tag from a trajectory (the name is matched ignoring case)",
    )
    def delete(self, request: Request, pk: int, name: str) -> Response:
        trajectory = _trajectory(request, pk, Capability.ANNOTATE)
        link = selectors.trajectory_tag_named(trajectory, name)
        if link is None:
            raise NotFound("This trajectory has no such tag.")
        review_services.tag_remove(trajectory=trajectory, user=request.user, tag=link.tag)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TrajectoryTurnJudgementsView(APIView):
    @extend_schema(
        responses={200: s.TurnJudgementsSerializer, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="A trajectory's turn judgements and the per-turn rewards they attribute",
    )
    def get(self, request: Request, pk: int) -> Response:
        trajectory = _trajectory(request, pk, Capability.READ)
        return Response(_turn_judgements_body(trajectory))

    @extend_schema(
        request=s.TurnJudgementInputSerializer,
        responses={201: s.TurnJudgementsSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Mark the turn where the trajectory went wrong, or prefer its turn over another's at the same point",
    )
    def post(self, request: Request, pk: int) -> Response:
        trajectory = _trajectory(request, pk, Capability.ANNOTATE)
        data = parse(s.TurnJudgementInputSerializer, request.data)
        if data["verdict"] == "wrong":
            review_services.turn_mark_wrong(
                trajectory=trajectory, annotator=request.user, turn_index=data["turn_index"]
            )
        else:
            if "other" not in data:
                raise ValidationError({"other": ["Name the trajectory whose turn this one beats."]})
            other = _trajectory(request, data["other"], Capability.READ)
            review_services.turn_prefer(
                trajectory=trajectory,
                turn_index=data["turn_index"],
                other=other,
                other_turn_index=data.get("other_turn_index", data["turn_index"]),
                annotator=request.user,
            )
        return Response(_turn_judgements_body(trajectory), status=201)

    @extend_schema(
        responses={204: None, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Withdraw your turn judgements on this trajectory",
    )
    def delete(self, request: Request, pk: int) -> Response:
        trajectory = _trajectory(request, pk, Capability.ANNOTATE)
        review_services.turn_judgements_withdraw(trajectory=trajectory, annotator=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _turn_judgements_body(trajectory: Trajectory) -> dict:
    judged = selectors.turn_judgements(trajectory)
    return s.TurnJudgementsSerializer(
        {"turn_rewards": {str(k): v for k, v in judged.rewards.items()}, "judgements": judged.judgements}
    ).data


# --- review: preference queues and their datasets ---------------------------------------------------------


def _queue(request: Request, pk: int, need: Capability) -> tuple[ProjectAccess, PreferenceQueue]:
    queue = access_queue(request.user, pk, need, queryset=selectors.preference_queue_queryset())
    return access_project_by_id(request.user, queue.project_id, need), queue


class PreferenceQueueListView(generics.ListAPIView):
    serializer_class = s.PreferenceQueueSerializer

    def get_queryset(self):
        access = access_project(self.request.user, self.kwargs["slug"], Capability.ANNOTATE)
        return selectors.queue_list(access=access)


class PreferenceQueueDetailView(APIView):
    @extend_schema(
        responses={200: s.PreferenceQueueDetailSerializer, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="A preference queue with its progress; agreement for researchers and owners",
    )
    def get(self, request: Request, pk: int) -> Response:
        access, queue = _queue(request, pk, Capability.ANNOTATE)
        summary = None
        if access.can(
            Capability.LAUNCH
        ):  # as on the queue page: annotators see progress, not each other's votes
            summary = selectors.queue_agreement(queue)
        context = {
            "progress": selectors.queue_progress(queue),
            "agreement": summary,
            "may_annotate": queue.annotatable_by(access.membership),
        }
        return Response(s.PreferenceQueueDetailSerializer(queue, context=context).data)


class PreferenceSnapshotListView(generics.ListAPIView):
    serializer_class = s.PreferenceSnapshotSerializer

    def get_queryset(self):
        _access, queue = _queue(self.request, self.kwargs["pk"], Capability.LAUNCH)
        return selectors.snapshot_list(queue)

    @extend_schema(
        request=s.SnapshotInputSerializer,
        responses={
            201: s.PreferenceSnapshotSerializer,
            400: VALIDATION_ERROR,
            403: FORBIDDEN,
            404: NOT_FOUND,
        },
        summary="Freeze the queue's judgements into the next version of its preference dataset",
    )
    def post(self, request: Request, pk: int) -> Response:
        _access, queue = _queue(request, pk, Capability.LAUNCH)
        data = parse(s.SnapshotInputSerializer, request.data if request.body else {})  # the body is optional
        snapshot = review_services.snapshot_create(
            queue, request.user, complete_only=data["complete_only"], include_turns=data["include_turns"]
        )
        snapshot = selectors.snapshot_list(queue).get(pk=snapshot.pk)
        return Response(s.PreferenceSnapshotSerializer(snapshot).data, status=201)


class PreferenceSnapshotExportView(APIView):
    content_negotiation_class = DownloadNegotiation

    @extend_schema(
        parameters=[s.SnapshotExportQuerySerializer],
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(OpenApiTypes.STR, description="the dataset file"),
            (200, "application/vnd.apache.parquet"): OpenApiResponse(
                OpenApiTypes.BINARY, description="the dataset file"
            ),
            400: VALIDATION_ERROR,
            403: FORBIDDEN,
            404: NOT_FOUND,
        },
        summary="Download a preference dataset as DPO JSON lines or parquet",
    )
    def get(self, request: Request, pk: int) -> HttpResponse:
        snapshot = access_snapshot(
            request.user, pk, Capability.LAUNCH, queryset=selectors.preference_snapshot_queryset()
        )
        query = parse(s.SnapshotExportQuerySerializer, request.query_params)
        return exports.download_response(snapshot, query["format"])


class QueueJudgeCancelView(APIView):
    @extend_schema(
        request=None,
        responses={200: JobCancelSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Stop an LLM judge annotating the queue: a queued one at once, a judging one within seconds "
        "(its answers so far stay)",
    )
    def post(self, request: Request, pk: int, judge_id: int) -> Response:
        _access, queue = _queue(request, pk, Capability.LAUNCH)
        judge = QueueJudge.objects.filter(queue=queue, pk=judge_id).first()
        if judge is None:
            raise NotFound("No such judge on this queue.")
        result = review_services.queue_judge_cancel(judge=judge)
        judge.refresh_from_db(fields=["status"])
        return Response({"result": result, "status": judge.status})


# --- review: disagreements and adjudication -----------------------------------------------------------------


class QueueDisagreementsView(APIView):
    @extend_schema(
        parameters=[s.DisagreementsQuerySerializer],
        responses={200: s.DisagreementsSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="The pairs the queue's voters split on, every vote and rationale, what a snapshot exports "
        "for each, and κ before / after adjudication (researchers and owners)",
    )
    def get(self, request: Request, pk: int) -> Response:
        _access, queue = _queue(request, pk, Capability.ADJUDICATE)
        query = parse(s.DisagreementsQuerySerializer, request.query_params)
        return Response(s.DisagreementsSerializer(selectors.disagreements(queue, show=query["show"])).data)


class PairAdjudicationView(APIView):
    @extend_schema(
        request=s.AdjudicationInputSerializer,
        responses={200: s.AdjudicationSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Settle a pair its voters split on (or change the decision): the next snapshots export it, "
        "with who settled it, when and the votes it overrode",
    )
    def post(self, request: Request, pk: int, pair_id: int) -> Response:
        _access, queue = _queue(request, pk, Capability.ADJUDICATE)
        pair = PreferencePair.objects.select_related("queue__project").filter(queue=queue, pk=pair_id).first()
        if pair is None:
            raise NotFound("No such pair in this queue.")
        data = parse(s.AdjudicationInputSerializer, request.data)
        adjudication = review_services.pair_adjudicate(
            pair=pair, user=request.user, choice=data["choice"], rationale=data["rationale"]
        )
        return Response(s.AdjudicationSerializer(adjudication).data)
