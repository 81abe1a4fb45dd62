"""The JSON API of learned reward models: train one on a snapshot, read one (with its reliability), add it
to a rubric."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trainers.learn.reward_training import TRAINING_SCHEMA
from webapp.api import fields
from webapp.api.base import FORBIDDEN, NOT_FOUND, VALIDATION_ERROR, parse
from webapp.core.dispatch import Queue
from webapp.experiments.models import Rubric
from webapp.experiments.selectors import startable_checkpoint
from webapp.projects.access import Capability, access_reward_model, access_snapshot
from webapp.rewards import selectors, services
from webapp.rewards.models import DEFAULT_ACCURACY_THRESHOLD, RewardModel


class ReliabilitySerializer(serializers.Serializer):
    reliable = serializers.BooleanField()
    reason = serializers.CharField(help_text="why it is not reliable; empty when it is")
    accuracy = serializers.FloatField(allow_null=True, help_text="held-out pairwise accuracy")
    n = serializers.IntegerField(help_text="held-out pairs")
    low = serializers.FloatField(help_text="Wilson 95 % interval, lower bound")
    high = serializers.FloatField(help_text="Wilson 95 % interval, upper bound")
    threshold = serializers.FloatField()
    summary = serializers.CharField()


class RewardModelSerializer(serializers.ModelSerializer):
    reliability = serializers.SerializerMethodField()
    dispatch_pending = serializers.SerializerMethodField(
        help_text="true while the model is queued here but its training task is not yet with a worker "
        "queue: the broker (Redis) was unreachable when it was asked for; it is sent within about 15 s of "
        "the broker answering again. Do not train it again."
    )

    class Meta:
        model = RewardModel
        fields = [
            "id",
            "name",
            "version",
            "snapshot",
            "base_checkpoint",
            "status",
            "params",
            "accuracy_threshold",
            "metrics",
            "path",
            "error_message",
            "created_at",
            "finished_at",
            "cancel_requested",
            "dispatch_pending",
            "reliability",
        ]

    def get_dispatch_pending(self, reward_model: RewardModel) -> bool:
        return reward_model.dispatch_pending()

    @extend_schema_field(ReliabilitySerializer)
    def get_reliability(self, reward_model: RewardModel) -> dict:
        return reward_model.reliability().as_dict()


@extend_schema_field(TRAINING_SCHEMA)
class TrainingParamsField(serializers.DictField):
    pass


class TrainInputSerializer(serializers.Serializer):
    name = fields.name(RewardModel, help_text="the model's name; training it again makes its next version")
    params = TrainingParamsField(
        default=dict, help_text="training knobs (trainers/learn/reward_training.py); defaults fill the rest"
    )
    queue = serializers.ChoiceField(choices=Queue.choices, default=Queue.CPU)
    accuracy_threshold = serializers.FloatField(
        min_value=0.0,
        max_value=1.0,
        default=DEFAULT_ACCURACY_THRESHOLD,
        help_text="reliable from this held-out accuracy",
    )
    base_checkpoint = fields.object_id(
        required=False,
        allow_null=True,
        help_text="id of a kept checkpoint of this project (a GRPO run's, LoRA included) whose policy is the frozen "
        "base that embeds the pairs; omitted: the bundled model",
    )


class RewardModelTrainView(APIView):
    @extend_schema(
        request=TrainInputSerializer,
        responses={201: RewardModelSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Train a reward model on a preference dataset (queued on a worker), from the bundled model or a "
        "checkpoint's policy",
    )
    def post(self, request: Request, pk: int) -> Response:
        snapshot = access_snapshot(request.user, pk, Capability.LAUNCH)
        data = parse(TrainInputSerializer, request.data)
        checkpoint_id = data.pop("base_checkpoint", None)
        base = startable_checkpoint(project=snapshot.project, checkpoint_id=checkpoint_id)
        if checkpoint_id is not None and base is None:
            raise serializers.ValidationError(
                {"base_checkpoint": ["Choose a kept checkpoint of this project."]}
            )
        reward_model = services.reward_model_train(
            snapshot=snapshot, user=request.user, base_checkpoint=base, **data
        )
        created = selectors.reward_model_queryset().get(pk=reward_model.pk)
        return Response(RewardModelSerializer(created).data, status=201)


class RegisterInputSerializer(serializers.Serializer):
    rubric = fields.object_id(help_text="id of a rubric of this project")
    weight = serializers.FloatField(default=1.0)
    criterion_name = serializers.CharField(max_length=80, required=False, allow_blank=True, default="")
    allow_unreliable = serializers.BooleanField(
        default=False,
        help_text="add the model although it is not reliable (see its reliability); without this such a "
        "model is refused with 400",
    )
    only_when_checks_pass = serializers.BooleanField(
        default=True,
        help_text="count the criterion only on trajectories that pass the rubric's verifiable criteria "
        "(docs/rubrics.md); false: on every trajectory",
    )


class RubricVersionCreatedSerializer(serializers.Serializer):
    rubric = serializers.IntegerField()
    version = serializers.IntegerField()
    spec = serializers.JSONField()


def _reward_model(request: Request, pk: int, need: str) -> RewardModel:
    return access_reward_model(request.user, pk, need, queryset=selectors.reward_model_queryset())


class RewardModelDetailView(APIView):
    @extend_schema(responses={200: RewardModelSerializer, 404: NOT_FOUND})
    def get(self, request: Request, pk: int) -> Response:
        return Response(RewardModelSerializer(_reward_model(request, pk, Capability.READ)).data)


class RewardModelRegisterView(APIView):
    @extend_schema(
        request=RegisterInputSerializer,
        responses={
            201: RubricVersionCreatedSerializer,
            400: VALIDATION_ERROR,
            403: FORBIDDEN,
            404: NOT_FOUND,
        },
        summary="Add a ready reward model to a rubric (its next version); an unreliable one needs allow_unreliable",
    )
    def post(self, request: Request, pk: int) -> Response:
        reward_model = _reward_model(request, pk, Capability.LAUNCH)
        data = parse(RegisterInputSerializer, request.data)
        rubric = Rubric.objects.filter(project=reward_model.project, pk=data.pop("rubric")).first()
        if rubric is None:
            raise serializers.ValidationError({"rubric": ["No such rubric in this project."]})
        version = services.reward_model_register(
            reward_model=reward_model, rubric=rubric, user=request.user, **data
        )
        return Response({"rubric": rubric.pk, "version": version.number, "spec": version.spec}, status=201)


class JobCancelSerializer(serializers.Serializer):
    result = serializers.ChoiceField(
        choices=["cancelled", "cancel_requested"],
        help_text="cancelled: it was still queued and is dropped; cancel_requested: its worker stops it "
        "within seconds (its status turns cancelled)",
    )
    status = serializers.CharField(help_text="its status now")


class RewardModelCancelView(APIView):
    @extend_schema(
        request=None,
        responses={200: JobCancelSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Cancel a reward model's training: a queued one at once, a training one within seconds",
    )
    def post(self, request: Request, pk: int) -> Response:
        reward_model = _reward_model(request, pk, Capability.LAUNCH)
        result = services.reward_model_cancel(reward_model=reward_model)
        reward_model.refresh_from_db(fields=["status"])
        return Response({"result": result, "status": reward_model.status})
