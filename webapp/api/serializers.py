"""Serializers: output shapes, and input shapes that only coerce types.

Every rule about what a valid environment, rubric or run is lives in the services (which the HTML
forms call too); the input serializers here declare field types and which fields must be present,
so that the OpenAPI document describes the bodies and a wrong JSON type is reported by field name.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from webapp.accounts.models import ApiToken
from webapp.experiments.models import (
    Checkpoint,
    Environment,
    EnvironmentVersion,
    Queue,
    Rubric,
    RubricVersion,
    Run,
    RunStatus,
)
from webapp.projects.models import ROLE_CAPABILITIES, Membership, Project, Role
from webapp.review.exports import EXPORT_FILES
from webapp.review.models import Comment, PreferenceQueue, PreferenceSnapshot, TrajectoryTag
from webapp.rollouts.models import Split, Trajectory, TrajectoryStatus, Turn


def _username(source: str = "created_by.username") -> serializers.CharField:
    return serializers.CharField(source=source, read_only=True, allow_null=True, default=None)


# --- errors (documentation of the envelope `webapp.api.errors` writes) ---------------------------


class ErrorSerializer(serializers.Serializer):
    error = serializers.CharField(help_text="machine-readable code: validation_failed, malformed_json, not_found…")
    detail = serializers.CharField()


class ValidationErrorSerializer(ErrorSerializer):
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="dotted field path (e.g. config.max_turns, criteria.1.weight) → messages",
    )


# --- projects and members ---------------------------------------------------------------------------


class ProjectSerializer(serializers.ModelSerializer):
    created_by = _username()
    role = serializers.CharField(source="my_role", read_only=True, allow_null=True, default=None,
                                 help_text="your role in this project")
    run_count = serializers.IntegerField(read_only=True, default=0)
    active_run_count = serializers.IntegerField(read_only=True, default=0)
    best_reward = serializers.FloatField(read_only=True, allow_null=True, default=None)

    class Meta:
        model = Project
        fields = ["id", "name", "slug", "description", "created_by", "created_at", "role", "run_count",
                  "active_run_count", "best_reward"]


class ProjectDetailSerializer(ProjectSerializer):
    capabilities = serializers.SerializerMethodField(help_text="what your role allows: read, annotate, launch, manage")

    class Meta(ProjectSerializer.Meta):
        fields = [*ProjectSerializer.Meta.fields, "capabilities"]

    def get_capabilities(self, project: Project) -> list[str]:
        role = getattr(project, "my_role", None)
        return sorted(ROLE_CAPABILITIES.get(role, ())) if role else []


class ProjectInputSerializer(serializers.Serializer):
    name = serializers.CharField(allow_blank=True, trim_whitespace=False)
    description = serializers.CharField(allow_blank=True, default="")
    slug = serializers.CharField(allow_blank=True, default="", help_text="derived from the name when empty")


class MembershipSerializer(serializers.ModelSerializer):
    user_id = serializers.IntegerField(read_only=True)
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "user_id", "username", "role", "created_at"]


class MemberInputSerializer(serializers.Serializer):
    username = serializers.CharField(allow_blank=True)
    role = serializers.CharField(allow_blank=True, help_text=f"one of {', '.join(Role.values)}")


class MemberUpdateSerializer(serializers.Serializer):
    role = serializers.CharField(allow_blank=True, help_text=f"one of {', '.join(Role.values)}")


# --- environments and rubrics ---------------------------------------------------------------------


class EnvironmentVersionSerializer(serializers.ModelSerializer):
    created_by = _username()

    class Meta:
        model = EnvironmentVersion
        fields = ["id", "number", "kind", "config", "note", "created_by", "created_at"]


def _latest(obj: Any) -> Any:
    prefetched = getattr(obj, "versions_desc", None)
    if prefetched is not None:
        return prefetched[0] if prefetched else None
    return obj.versions.order_by("-number").first()


class EnvironmentSerializer(serializers.ModelSerializer):
    created_by = _username()
    latest_version = serializers.SerializerMethodField()
    version_count = serializers.SerializerMethodField()

    class Meta:
        model = Environment
        fields = ["id", "name", "description", "created_by", "created_at", "updated_at", "latest_version",
                  "version_count"]

    @extend_schema_field(EnvironmentVersionSerializer)
    def get_latest_version(self, environment: Environment) -> dict:
        return EnvironmentVersionSerializer(_latest(environment)).data

    def get_version_count(self, environment: Environment) -> int:
        prefetched = getattr(environment, "versions_desc", None)
        return len(prefetched) if prefetched is not None else environment.versions.count()


class EnvironmentInputSerializer(serializers.Serializer):
    name = serializers.CharField(allow_blank=True, trim_whitespace=False)
    description = serializers.CharField(allow_blank=True, default="")
    kind = serializers.CharField(allow_blank=True, help_text="a registered environment kind (GET /api/kinds/environments/)")
    config = serializers.JSONField(default=dict, help_text="validated by the kind's JSON schema")


class EnvironmentUpdateSerializer(serializers.Serializer):
    """Every field optional: kind and config default to the latest version's; a changed kind or config
    makes a new version, which later runs use (earlier runs keep theirs)."""

    name = serializers.CharField(allow_blank=True, trim_whitespace=False, required=False)
    description = serializers.CharField(allow_blank=True, required=False)
    kind = serializers.CharField(allow_blank=True, required=False)
    config = serializers.JSONField(required=False)
    note = serializers.CharField(allow_blank=True, default="", max_length=200, help_text="what changed")


class RubricVersionSerializer(serializers.ModelSerializer):
    created_by = _username()

    class Meta:
        model = RubricVersion
        fields = ["id", "number", "spec", "note", "created_by", "created_at"]


class RubricSerializer(serializers.ModelSerializer):
    created_by = _username()
    latest_version = serializers.SerializerMethodField()
    version_count = serializers.SerializerMethodField()

    class Meta:
        model = Rubric
        fields = ["id", "name", "description", "created_by", "created_at", "updated_at", "latest_version",
                  "version_count"]

    @extend_schema_field(RubricVersionSerializer)
    def get_latest_version(self, rubric: Rubric) -> dict:
        return RubricVersionSerializer(_latest(rubric)).data

    def get_version_count(self, rubric: Rubric) -> int:
        prefetched = getattr(rubric, "versions_desc", None)
        return len(prefetched) if prefetched is not None else rubric.versions.count()


class CriterionInputSerializer(serializers.Serializer):
    """Documentation of one criterion; the rubric service validates the list as a whole."""

    name = serializers.CharField()
    kind = serializers.CharField(help_text="a registered criterion kind (GET /api/kinds/criteria/)")
    weight = serializers.FloatField(help_text="non-negative")
    params = serializers.JSONField(required=False, help_text="validated by the kind's JSON schema")


class RubricInputSerializer(serializers.Serializer):
    """The rubric's spec is the body itself (aggregation, criteria), so error paths such as
    `criteria.1.weight` point into the body."""

    name = serializers.CharField(allow_blank=True, trim_whitespace=False)
    description = serializers.CharField(allow_blank=True, default="")
    aggregation = serializers.CharField(required=False, help_text="how weighted criteria combine")
    criteria = serializers.ListField(child=serializers.JSONField(), required=False,
                                     help_text="[{name, kind, weight, params}]")


class RubricUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(allow_blank=True, trim_whitespace=False, required=False)
    description = serializers.CharField(allow_blank=True, required=False)
    aggregation = serializers.CharField(required=False)
    criteria = serializers.ListField(child=serializers.JSONField(), required=False)
    note = serializers.CharField(allow_blank=True, default="", max_length=200)


# --- runs -------------------------------------------------------------------------------------------


class PinnedVersionSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="the environment's or rubric's id")
    name = serializers.CharField()
    version = serializers.IntegerField()


class RunSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = _username()
    environment = serializers.SerializerMethodField()
    rubric = serializers.SerializerMethodField()
    progress = serializers.FloatField(read_only=True)
    is_active = serializers.BooleanField(read_only=True)

    class Meta:
        model = Run
        fields = [
            "id", "project", "name", "origin", "created_by", "created_at", "environment", "rubric", "preset", "overrides",
            "queue", "parent", "parent_checkpoint", "lineage", "status", "status_changed_at", "started_at",
            "finished_at", "heartbeat_at", "cancel_requested", "error_message", "current_step", "max_steps",
            "progress", "is_active", "best_reward", "last_reward", "last_seq",
        ]

    @extend_schema_field(PinnedVersionSerializer(allow_null=True))
    def get_environment(self, run: Run) -> dict | None:
        version = run.environment_version  # None for an external run that pinned nothing
        if version is None:
            return None
        return {"id": version.environment_id, "name": version.environment.name, "version": version.number}

    @extend_schema_field(PinnedVersionSerializer(allow_null=True))
    def get_rubric(self, run: Run) -> dict | None:
        version = run.rubric_version
        if version is None:
            return None
        return {"id": version.rubric_id, "name": version.rubric.name, "version": version.number}


class RunDetailSerializer(RunSerializer):
    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "resolved_config", "error_traceback", "worker", "task_id"]


class RunCreatedSerializer(RunDetailSerializer):
    ingest_token = serializers.SerializerMethodField(
        help_text="the trainer's token for this run's event ingestion; shown once, stored only as a hash"
    )

    class Meta(RunDetailSerializer.Meta):
        fields = [*RunDetailSerializer.Meta.fields, "ingest_token"]

    def get_ingest_token(self, run: Run) -> str:
        return self.context["ingest_token"]


class RunInputSerializer(serializers.Serializer):
    name = serializers.CharField(allow_blank=True, trim_whitespace=False)
    environment = serializers.IntegerField(help_text="id of an environment of this project (its latest version is pinned)")
    rubric = serializers.IntegerField(help_text="id of a rubric of this project (its latest version is pinned)")
    preset = serializers.CharField(allow_blank=True, default="grpo", help_text="GET /api/presets/ lists them")
    overrides = serializers.JSONField(default=dict, help_text="knobs that differ from the preset")
    queue = serializers.CharField(default=Queue.CPU, help_text=f"one of {', '.join(Queue.values)}")


class RunFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=RunStatus.choices, required=False)


class RunCancelSerializer(serializers.Serializer):
    result = serializers.ChoiceField(
        choices=[RunStatus.CANCELLED.value, "cancel_requested"],
        help_text="CANCELLED: a queued run was cancelled at once; cancel_requested: the trainer stops at its next report",
    )
    run = RunDetailSerializer()


class CheckpointSerializer(serializers.ModelSerializer):
    class Meta:
        model = Checkpoint
        fields = ["id", "step", "path", "kind", "metrics", "created_at", "deleted"]


# --- trajectories and metrics ------------------------------------------------------------------------


class TurnSerializer(serializers.ModelSerializer):
    class Meta:
        model = Turn
        fields = ["index", "role", "text", "tool_name", "tool_args", "tool_result", "reward"]


class TurnWithTokensSerializer(TurnSerializer):
    class Meta(TurnSerializer.Meta):
        fields = [*TurnSerializer.Meta.fields, "token_ids", "loss_mask"]


class TrajectorySerializer(serializers.ModelSerializer):
    class Meta:
        model = Trajectory
        fields = [
            "id", "run", "step", "split", "group_index", "sample_index", "task_id", "seed", "prompt", "reward",
            "components", "advantage", "status", "num_turns", "num_tool_calls", "prompt_tokens",
            "completion_tokens", "policy_version", "created_at",
        ]


class TrajectoryDetailSerializer(TrajectorySerializer):
    turns = serializers.SerializerMethodField()

    class Meta(TrajectorySerializer.Meta):
        fields = [*TrajectorySerializer.Meta.fields, "env_state", "rubric_version", "turns"]

    @extend_schema_field(TurnWithTokensSerializer(many=True))
    def get_turns(self, trajectory: Trajectory) -> list[dict]:
        serializer = TurnWithTokensSerializer if self.context.get("include_tokens") else TurnSerializer
        return serializer(trajectory.turns.all(), many=True).data


class TrajectoryFilterSerializer(serializers.Serializer):
    step = serializers.IntegerField(required=False, min_value=0)
    split = serializers.ChoiceField(choices=Split.choices, required=False)
    min_reward = serializers.FloatField(required=False)
    max_reward = serializers.FloatField(required=False)
    group = serializers.IntegerField(required=False, min_value=0, help_text="group index within the step")
    task_id = serializers.CharField(required=False)
    status = serializers.ChoiceField(choices=TrajectoryStatus.choices, required=False)


class TrajectoryDetailQuerySerializer(serializers.Serializer):
    include_tokens = serializers.BooleanField(default=False, help_text="add token ids and loss masks to turns")


class MetricsQuerySerializer(serializers.Serializer):
    keys = serializers.CharField(required=False, help_text="comma-separated metric keys; all keys when absent")
    max_points = serializers.IntegerField(default=2000, min_value=10, max_value=100_000,
                                          help_text="longer series are downsampled into bucket means")


class MetricSeriesSerializer(serializers.Serializer):
    key = serializers.CharField()
    steps = serializers.ListField(child=serializers.IntegerField())
    values = serializers.ListField(child=serializers.FloatField())
    min = serializers.ListField(child=serializers.FloatField())
    max = serializers.ListField(child=serializers.FloatField())
    total_points = serializers.IntegerField()
    downsampled = serializers.BooleanField()


class MetricsSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    keys = serializers.ListField(child=serializers.CharField(), help_text="every metric key the run has")
    series = serializers.DictField(child=MetricSeriesSerializer(), help_text="key → series, for the requested keys")


# --- registries --------------------------------------------------------------------------------------


class KindSerializer(serializers.Serializer):
    name = serializers.CharField()
    title = serializers.CharField()
    description = serializers.CharField()
    config_schema = serializers.JSONField(help_text="JSON schema of the kind's config / params")
    needs_model = serializers.BooleanField()


class PresetSerializer(serializers.Serializer):
    name = serializers.CharField()
    title = serializers.CharField()
    knobs = serializers.JSONField(help_text="what the preset sets over the defaults")
    resolved = serializers.JSONField(help_text="the complete config the preset gives with no overrides")


class PresetsSerializer(serializers.Serializer):
    presets = PresetSerializer(many=True)
    schema = serializers.JSONField(help_text="JSON schema of the run config (every knob, its limits and default)")
    groups = serializers.DictField(child=serializers.CharField(), help_text="knob group → section title")
    defaults = serializers.JSONField()


# --- tokens ------------------------------------------------------------------------------------------


class ApiTokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "revoked_at"]


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.SerializerMethodField(help_text="use as `Authorization: Bearer <token>`; shown once")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]

    def get_token(self, token: ApiToken) -> str:
        return self.context["raw_token"]


class ApiTokenInputSerializer(serializers.Serializer):
    name = serializers.CharField(allow_blank=True)


class RunContinueInputSerializer(serializers.Serializer):
    """Resume or fork: the checkpoint to start from (the latest kept one if omitted)."""

    checkpoint = serializers.IntegerField(required=False, help_text="A checkpoint id of this run.")


class RunForkInputSerializer(RunContinueInputSerializer):
    name = serializers.CharField(required=False, allow_blank=True, max_length=120)
    overrides = serializers.DictField(
        required=False, help_text="The fork's complete knob overrides of the parent's preset; "
        "defaults to the parent's overrides."
    )


# --- review: comments, tags, preference queues and datasets -------------------------------------------

EXPORT_FORMATS = tuple(EXPORT_FILES)



class CommentSerializer(serializers.ModelSerializer):
    author = _username("author.username")
    deleted = serializers.BooleanField(source="is_deleted", read_only=True,
                                       help_text="deleted comments keep their place; their body is empty")

    class Meta:
        model = Comment
        fields = ["id", "trajectory", "turn_index", "author", "body", "created_at", "edited_at", "deleted"]


class CommentInputSerializer(serializers.Serializer):
    body = serializers.CharField(allow_blank=True, trim_whitespace=False,
                                 help_text="plain text; @username notifies that member")
    turn_index = serializers.IntegerField(required=False, allow_null=True, min_value=0,
                                          help_text="comment on one turn of the trajectory")


class TrajectoryTagSerializer(serializers.ModelSerializer):
    name = serializers.CharField(source="tag.name", read_only=True)
    color = serializers.CharField(source="tag.color", read_only=True)
    added_by = _username("added_by.username")

    class Meta:
        model = TrajectoryTag
        fields = ["name", "color", "added_by", "added_at"]


class TagInputSerializer(serializers.Serializer):
    name = serializers.CharField(allow_blank=True, help_text="the project's tag of this name (any case) is reused")


class AnnotatorProgressSerializer(serializers.Serializer):
    username = serializers.CharField()
    judged = serializers.IntegerField()
    available = serializers.IntegerField(help_text="pairs still open to this annotator")
    last_at = serializers.DateTimeField(allow_null=True)


class QueueProgressSerializer(serializers.Serializer):
    total_pairs = serializers.IntegerField()
    done_pairs = serializers.IntegerField(help_text="pairs with all `overlap` judgements")
    judgements = serializers.IntegerField()
    wanted = serializers.IntegerField(help_text="total_pairs × overlap")
    percent = serializers.IntegerField()
    annotators = AnnotatorProgressSerializer(many=True)
    choices = serializers.DictField(
        child=serializers.IntegerField(), allow_null=True,
        help_text="judgements per canonical choice (a, b, tie, both_bad); null unless you may launch",
    )


class PairwiseAgreementSerializer(serializers.Serializer):
    first = serializers.CharField()
    second = serializers.CharField()
    items = serializers.IntegerField(help_text="pairs both judged")
    percent = serializers.FloatField(allow_null=True, help_text="0…1")
    kappa = serializers.FloatField(allow_null=True, help_text="Cohen's kappa; null when undefined")


class JudgeAgreementSerializer(serializers.Serializer):
    criterion = serializers.CharField()
    items = serializers.IntegerField()
    percent = serializers.FloatField(allow_null=True)
    kappa = serializers.FloatField(allow_null=True)


class AgreementSerializer(serializers.Serializer):
    raters = serializers.ListField(child=serializers.CharField())
    pairs = PairwiseAgreementSerializer(many=True, help_text="every two raters")
    cohen = PairwiseAgreementSerializer(allow_null=True, help_text="when exactly two people judged")
    fleiss = serializers.FloatField(allow_null=True, help_text="Fleiss' kappa over the pairs with all judgements")
    fleiss_items = serializers.IntegerField()
    fleiss_raters = serializers.IntegerField()
    judge = JudgeAgreementSerializer(allow_null=True, help_text="human majority vs the LLM judge component")


class PreferenceQueueSerializer(serializers.ModelSerializer):
    created_by = _username()
    total_pairs = serializers.IntegerField(read_only=True)
    done_pairs = serializers.IntegerField(read_only=True, help_text="pairs with all `overlap` judgements")

    class Meta:
        model = PreferenceQueue
        fields = ["id", "name", "source", "pairing", "overlap", "rationale_required", "created_by", "created_at",
                  "total_pairs", "done_pairs"]


class PreferenceQueueDetailSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = _username()
    runs = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    annotators = serializers.SlugRelatedField(slug_field="username", many=True, read_only=True)
    may_annotate = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()
    agreement = serializers.SerializerMethodField(help_text="null unless you may launch (researchers, owners)")

    class Meta:
        model = PreferenceQueue
        fields = ["id", "project", "name", "instructions", "source", "pairing", "distinct_rewards", "build_params",
                  "runs", "annotators", "overlap", "rationale_required", "lock_seconds", "created_by", "created_at",
                  "may_annotate", "progress", "agreement"]

    def get_may_annotate(self, queue: PreferenceQueue) -> bool:
        return self.context["may_annotate"]

    @extend_schema_field(QueueProgressSerializer)
    def get_progress(self, queue: PreferenceQueue) -> dict:
        progress = self.context["progress"]
        body = {**vars(progress), "percent": progress.percent,
                "annotators": [vars(row) for row in progress.annotators]}
        if self.context["agreement"] is None:
            body["choices"] = None  # annotators do not see how the others voted
        return QueueProgressSerializer(body).data

    @extend_schema_field(AgreementSerializer(allow_null=True))
    def get_agreement(self, queue: PreferenceQueue) -> dict | None:
        summary = self.context["agreement"]
        if summary is None:
            return None
        return AgreementSerializer({
            "raters": summary.raters,
            # The summary keeps each cell under both (x, y) and (y, x): list every two raters once.
            "pairs": [vars(cell) for (first, second), cell in sorted(summary.cells.items()) if first < second],
            "cohen": vars(summary.cohen) if summary.cohen else None,
            "fleiss": summary.fleiss,
            "fleiss_items": summary.fleiss_items,
            "fleiss_raters": summary.fleiss_raters,
            "judge": vars(summary.judge) if summary.judge else None,
        }).data


class ExportUrlsSerializer(serializers.Serializer):
    dpo = serializers.CharField()
    parquet = serializers.CharField()


class PreferenceSnapshotSerializer(serializers.ModelSerializer):
    created_by = _username()
    rows = serializers.IntegerField(read_only=True, help_text="preference pairs in the dataset")
    exports = serializers.SerializerMethodField(help_text="download paths")

    class Meta:
        model = PreferenceSnapshot
        fields = ["id", "queue", "version", "rows", "provenance", "created_by", "created_at", "exports"]

    @extend_schema_field(ExportUrlsSerializer)
    def get_exports(self, snapshot: PreferenceSnapshot) -> dict[str, str]:
        url = reverse("api:preference-snapshot-export", args=[snapshot.pk])
        return {fmt: f"{url}?format={fmt}" for fmt in EXPORT_FORMATS}


class SnapshotInputSerializer(serializers.Serializer):
    complete_only = serializers.BooleanField(
        default=False, help_text="leave out pairs that do not have all their judgements yet"
    )


class SnapshotExportQuerySerializer(serializers.Serializer):
    format = serializers.ChoiceField(
        choices=EXPORT_FORMATS, default="dpo",
        help_text="dpo: JSON lines {prompt, chosen, rejected, chosen_reward, rejected_reward, provenance}; "
        "parquet: the same rows, provenance flattened into columns",
        error_messages={"invalid_choice": f"Unknown format \"{{input}}\": one of {', '.join(EXPORT_FORMATS)}."},
    )
