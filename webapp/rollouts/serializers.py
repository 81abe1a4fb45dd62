"""API serializers: output shapes, and input shapes that only coerce types (the services hold the rules)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from trainers.sdk import wire
from webapp.api import fields
from webapp.experiments.models import Run
from webapp.rollouts.external import MAX_ALGORITHM_CHARS, MAX_CONFIG_BYTES
from webapp.rollouts.models import Split, Trajectory, TrajectoryStatus, Turn
from webapp.rollouts.selectors.metrics import DEFAULT_MAX_POINTS, MAX_MAX_POINTS, MIN_MAX_POINTS

# --- trajectories and metrics ------------------------------------------------------------------------


# Trajectory and turn fields are the wire format's stored columns (trainers/sdk/wire_trajectory.py): a field added there
# and to the model is served here without a change. Heavy ones only in the detail (and tokens on request).
_TOKEN_FIELDS = ("token_ids", "loss_mask", "token_stats")
_DETAIL_ONLY = ("env_state",)


class TurnSerializer(serializers.ModelSerializer):
    class Meta:
        model = Turn
        fields = ["index", *(c for c in wire.TURN.columns if c not in _TOKEN_FIELDS)]


class TurnWithTokensSerializer(TurnSerializer):
    class Meta(TurnSerializer.Meta):
        fields = [*TurnSerializer.Meta.fields, *_TOKEN_FIELDS]


class TrajectorySerializer(serializers.ModelSerializer):
    class Meta:
        model = Trajectory
        fields = [
            "id",
            "run",
            "step",
            *(c for c in wire.TRAJECTORY.columns if c not in _DETAIL_ONLY),
            "num_turns",
            "num_tool_calls",
            "created_at",
        ]


class TrajectoryDetailSerializer(TrajectorySerializer):
    turns = serializers.SerializerMethodField()

    class Meta(TrajectorySerializer.Meta):
        fields = [*TrajectorySerializer.Meta.fields, *_DETAIL_ONLY, "turns"]

    @extend_schema_field(TurnWithTokensSerializer(many=True))
    def get_turns(self, trajectory: Trajectory) -> list[dict]:
        serializer = TurnWithTokensSerializer if self.context.get("include_tokens") else TurnSerializer
        return serializer(trajectory.turns.all(), many=True).data


class TrajectoryFilterSerializer(serializers.Serializer):
    step = fields.count(required=False)
    split = serializers.ChoiceField(choices=Split.choices, required=False)
    min_reward = serializers.FloatField(required=False)
    max_reward = serializers.FloatField(required=False)
    group = fields.count(required=False, help_text="group index within the step")
    task_id = serializers.CharField(required=False, max_length=wire.TRAJECTORY["task_id"].max_length)
    status = serializers.ChoiceField(choices=TrajectoryStatus.choices, required=False)


class TrajectoryDetailQuerySerializer(serializers.Serializer):
    include_tokens = serializers.BooleanField(
        default=False, help_text="add token ids and loss masks to turns"
    )


class GroupQuerySerializer(serializers.Serializer):
    split = serializers.ChoiceField(
        choices=Split.choices, required=False, help_text="train or eval; both when absent"
    )
    before = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=wire.INT32_MAX,
        help_text="only steps before this one (the `next_before` of the previous page)",
    )


class GroupSerializer(serializers.Serializer):
    """One GRPO group: the statistics every page and the live feed show (`trainers.learn.algorithms.group_stats`)."""

    step = serializers.IntegerField()
    split = serializers.CharField()
    group = serializers.IntegerField(source="group_index")
    size = serializers.IntegerField(source="n")
    mean = serializers.FloatField()
    std = serializers.FloatField(help_text="unbiased sample std, as the GRPO advantage uses")
    min = serializers.FloatField(source="low")
    max = serializers.FloatField(source="high")
    zero_variance = serializers.BooleanField(help_text="a training group whose samples all scored the same")
    task_id = serializers.CharField(source="task")


class GroupPageSerializer(serializers.Serializer):
    groups = GroupSerializer(many=True, source="rows")
    next_before = serializers.IntegerField(allow_null=True)


class MetricsQuerySerializer(serializers.Serializer):
    keys = serializers.CharField(
        required=False, help_text="comma-separated metric keys; all keys when absent"
    )
    max_points = serializers.IntegerField(
        default=DEFAULT_MAX_POINTS,
        min_value=MIN_MAX_POINTS,
        max_value=MAX_MAX_POINTS,
        help_text="a longer series keeps its first and last point and each equal step range's lowest and "
        "highest point (spikes survive)",
    )
    start = serializers.IntegerField(
        required=False, min_value=0, max_value=2**31 - 1, help_text="the first step to include (a zoom)"
    )
    end = serializers.IntegerField(
        required=False, min_value=0, max_value=2**31 - 1, help_text="the last step to include (a zoom)"
    )

    def validate(self, attrs):
        if "start" in attrs and "end" in attrs and attrs["start"] > attrs["end"]:
            raise serializers.ValidationError({"end": ["must not be before start"]})
        return attrs


class MetricSeriesSerializer(serializers.Serializer):
    key = serializers.CharField()
    steps = serializers.ListField(child=serializers.IntegerField())
    values = serializers.ListField(child=serializers.FloatField())
    total_points = serializers.IntegerField()
    downsampled = serializers.BooleanField()


class MetricsSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    keys = serializers.ListField(child=serializers.CharField(), help_text="every metric key the run has")
    series = serializers.DictField(
        child=MetricSeriesSerializer(), help_text="key → series, for the requested keys"
    )


# --- external runs ---------------------------------------------------------------------------------


class ExternalRunInputSerializer(serializers.Serializer):
    name = fields.name(Run)
    config = serializers.DictField(
        required=False,
        help_text=f"what the trainer ran with, as a JSON object (at most {MAX_CONFIG_BYTES} bytes)",
    )
    algorithm = serializers.CharField(
        max_length=MAX_ALGORITHM_CHARS,
        required=False,
        default="external",
        help_text="a label shown where dashboard runs show their preset, e.g. 'trl-grpo'",
    )
    environment = fields.object_id(
        required=False, allow_null=True, help_text="optional: pin this environment"
    )
    rubric = fields.object_id(required=False, allow_null=True, help_text="optional: pin this rubric")
    max_steps = fields.count(default=0, help_text="the planned number of steps (0: unknown)")


class ExternalRunCreatedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    project = serializers.CharField()
    name = serializers.CharField()
    status = serializers.CharField()
    origin = serializers.CharField()
    ingest_token = serializers.CharField(
        help_text="the run's ingestion token; shown once, stored only as a hash"
    )
    events_url = serializers.CharField(help_text="where to POST event batches")
    page_url = serializers.CharField(help_text="the run's dashboard page")
