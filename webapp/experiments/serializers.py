"""API serializers: output shapes, and input shapes that only coerce types (the services hold the rules)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from trainers.config import PRESETS, RUN_CONFIG_SCHEMA
from trainers.learn.dpo import DPO_SCHEMA
from trainers.registry import environment_kinds
from trainers.rubrics import AGGREGATIONS, rubric_schema
from webapp.api import fields
from webapp.api.serializers import username_field
from webapp.core.dispatch import Queue
from webapp.experiments.models import (
    Checkpoint,
    Environment,
    EnvironmentVersion,
    Rubric,
    RubricVersion,
    Run,
    RunStatus,
)
from webapp.experiments.selectors import DEFAULT_RUN_SORT, RUN_SORTS
from webapp.fleet.selectors import run_queue_state

# --- environments and rubrics ---------------------------------------------------------------------


class EnvironmentVersionSerializer(serializers.ModelSerializer):
    created_by = username_field()

    class Meta:
        model = EnvironmentVersion
        fields = ["id", "number", "kind", "config", "note", "created_by", "created_at"]


class DefinitionSerializer(serializers.ModelSerializer):
    """An environment or a rubric (`VersionedDefinition`): its own fields, its latest version (as the
    subclass's version serializer shows it) and how many versions it has, both free when prefetched."""

    created_by = username_field()
    version_count = serializers.IntegerField(read_only=True)

    class Meta:
        fields = [
            "id",
            "name",
            "description",
            "created_by",
            "created_at",
            "updated_at",
            "latest_version",
            "version_count",
        ]


class EnvironmentSerializer(DefinitionSerializer):
    latest_version = EnvironmentVersionSerializer(read_only=True)

    class Meta(DefinitionSerializer.Meta):
        model = Environment


class EnvironmentPreviewInputSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="a registered environment kind (GET /api/kinds/environments/)")
    config = serializers.JSONField(
        default=dict, help_text="the config to try, as for creating an environment"
    )


class EnvironmentPreviewSerializer(serializers.Serializer):
    ok = serializers.BooleanField(help_text="false: see `errors` (by field) or `message`")
    kind = serializers.CharField()
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))
    message = serializers.CharField(
        allow_blank=True, help_text="why it could not be built or reached, in words"
    )
    health = serializers.CharField(allow_null=True, help_text="a remote environment's health line")
    task = serializers.DictField(allow_null=True, help_text="a sample task: {id, prompt, answer}")
    first_message = serializers.CharField(allow_null=True)
    system_prompt = serializers.CharField(allow_null=True)
    examples = serializers.ListField(child=serializers.DictField())
    tools = serializers.ListField(
        child=serializers.DictField(), help_text="[{name, description, parameters}]"
    )


# Named in settings.SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"] (another "kind" enum is the run's kind).
ENVIRONMENT_KIND_CHOICES = sorted(environment_kinds())


class EnvironmentInputSerializer(serializers.Serializer):
    name = fields.name(Environment)
    description = fields.description()
    kind = serializers.ChoiceField(
        choices=ENVIRONMENT_KIND_CHOICES,
        help_text="a registered environment kind (GET /api/kinds/environments/)",
    )
    config = serializers.DictField(
        default=dict,
        help_text="validated by the kind's JSON schema (`config_schema` in GET /api/kinds/environments/); "
        "errors at `config.<field>`",
    )


class EnvironmentUpdateSerializer(serializers.Serializer):
    """Every field optional: kind and config default to the latest version's; a changed kind or config
    makes a new version, which later runs use (earlier runs keep theirs)."""

    name = fields.name(Environment, required=False)
    description = fields.description(required=False)
    kind = serializers.ChoiceField(choices=ENVIRONMENT_KIND_CHOICES, required=False)
    config = serializers.DictField(required=False)
    note = serializers.CharField(
        allow_blank=True,
        default="",
        max_length=fields.column_length(EnvironmentVersion, "note"),
        help_text="what changed",
    )


class RubricVersionSerializer(serializers.ModelSerializer):
    created_by = username_field()

    class Meta:
        model = RubricVersion
        fields = ["id", "number", "spec", "note", "created_by", "created_at"]


class RubricSerializer(DefinitionSerializer):
    latest_version = RubricVersionSerializer(read_only=True)

    class Meta(DefinitionSerializer.Meta):
        model = Rubric


_RUBRIC_SCHEMA = rubric_schema()


@extend_schema_field(_RUBRIC_SCHEMA["properties"]["criteria"])
class CriteriaField(serializers.ListField):
    """A rubric's criteria. Validated as a whole by the rubric service (`trainers.rubrics.validate_rubric`,
    errors at `criteria.<index>.<field>`); documented by the same module's JSON schema."""

    child = serializers.JSONField()


class RubricInputSerializer(serializers.Serializer):
    """The rubric's spec is the body itself (aggregation, criteria), so error paths such as
    `criteria.1.weight` point into the body."""

    name = fields.name(Rubric)
    description = fields.description()
    aggregation = serializers.ChoiceField(
        choices=AGGREGATIONS, required=False, help_text="how weighted criteria combine (default weighted_sum)"
    )
    criteria = CriteriaField(help_text="[{name, kind, weight, params}]")


class RubricUpdateSerializer(serializers.Serializer):
    name = fields.name(Rubric, required=False)
    description = fields.description(required=False)
    aggregation = serializers.ChoiceField(choices=AGGREGATIONS, required=False)
    criteria = CriteriaField(required=False)
    note = serializers.CharField(
        allow_blank=True, default="", max_length=fields.column_length(RubricVersion, "note")
    )


# --- runs -------------------------------------------------------------------------------------------


class PinnedVersionSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="the environment's or rubric's id")
    name = serializers.CharField()
    version = serializers.IntegerField()


class RunSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = username_field()
    environment = serializers.SerializerMethodField()
    rubric = serializers.SerializerMethodField()
    progress = serializers.FloatField(read_only=True)
    is_active = serializers.BooleanField(read_only=True)

    class Meta:
        model = Run
        fields = [
            "id",
            "project",
            "name",
            "origin",
            "created_by",
            "created_at",
            "environment",
            "rubric",
            "preset",
            "overrides",
            "queue",
            "parent",
            "parent_checkpoint",
            "lineage",
            "kind",
            "preference_snapshot",
            "status",
            "status_changed_at",
            "started_at",
            "finished_at",
            "heartbeat_at",
            "cancel_requested",
            "error_message",
            "current_step",
            "max_steps",
            "progress",
            "is_active",
            "best_reward",
            "last_reward",
            "last_seq",
            "peak_rss_mb",
            "peak_gpu_mb",
            "tags",
            "note",
        ]
        read_only_fields = ["tags", "note"]

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
    dispatch_pending = serializers.SerializerMethodField(
        help_text="true while the run is queued here but its task is not yet with a worker queue: the "
        "broker (Redis) was unreachable when it was launched (its task_id reads 'unsent'); it is sent "
        "within about 15 s of the broker answering again. Do not launch it again."
    )

    queue_state = serializers.SerializerMethodField(
        help_text="while the run is queued: its position on its queue (1: next to start), the runs ahead "
        "(this project's named, others counted), the workers serving the queue that are online, and a "
        "warning when none is (the run waits until one starts); null otherwise"
    )

    class Meta(RunSerializer.Meta):
        fields = [
            *RunSerializer.Meta.fields,
            "resolved_config",
            "error_traceback",
            "worker",
            "task_id",
            "dispatch_pending",
            "queue_state",
        ]

    def get_dispatch_pending(self, run: Run) -> bool:
        return run.dispatch_pending()

    @extend_schema_field(serializers.JSONField(allow_null=True))
    def get_queue_state(self, run: Run) -> dict | None:
        return run_queue_state(run)


class RunCreatedSerializer(RunDetailSerializer):
    ingest_token = serializers.SerializerMethodField(
        help_text="the trainer's token for this run's event ingestion; shown once, stored only as a hash"
    )

    class Meta(RunDetailSerializer.Meta):
        fields = [*RunDetailSerializer.Meta.fields, "ingest_token"]

    def get_ingest_token(self, run: Run) -> str:
        return self.context["ingest_token"]


# The knobs a run may override: the run config schema (trainers/config.py) without its required list; the
# run service validates the resolved config with it (errors at `overrides.<knob>`).
_OVERRIDES_SCHEMA = {
    key: value for key, value in RUN_CONFIG_SCHEMA.items() if key not in ("$schema", "required", "title")
}


@extend_schema_field(_OVERRIDES_SCHEMA)
class OverridesField(serializers.DictField):
    pass


class RunInputSerializer(serializers.Serializer):
    name = fields.name(Run)
    environment = fields.object_id(
        help_text="id of an environment of this project (its latest version is pinned)"
    )
    rubric = fields.object_id(help_text="id of a rubric of this project (its latest version is pinned)")
    preset = serializers.ChoiceField(choices=list(PRESETS), default="grpo", help_text="GET /api/presets/")
    overrides = OverridesField(default=dict, help_text="knobs that differ from the preset")
    queue = serializers.ChoiceField(choices=Queue.choices, default=Queue.CPU)
    from_checkpoint = fields.object_id(
        required=False,
        allow_null=True,
        help_text="id of a checkpoint of this project (a DPO run's, say): the new run's policy starts from "
        "its weights (its `model` knob is the checkpoint directory; lineage `init`)",
    )


@extend_schema_field(DPO_SCHEMA)
class DpoConfigField(serializers.DictField):
    pass


class DpoRunInputSerializer(serializers.Serializer):
    name = fields.name(Run)
    config = DpoConfigField(
        default=dict, help_text="DPO knobs (trainers/recipes/dpo.py); defaults fill the rest"
    )
    queue = serializers.ChoiceField(choices=Queue.choices, default=Queue.CPU)
    from_checkpoint = fields.object_id(
        required=False,
        allow_null=True,
        help_text="id of a kept checkpoint of this project (a GRPO run's, LoRA included): the policy DPO trains "
        "starts from its weights instead of the base model (lineage `init`, as the snapshot page's choice)",
    )


class RunFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=RunStatus.choices, required=False)
    q = serializers.CharField(required=False, max_length=200, help_text="text in the name, note or a tag")
    tag = serializers.CharField(required=False, max_length=40, help_text="runs with this tag (case aside)")
    sort = serializers.ChoiceField(
        choices=list(RUN_SORTS), required=False, default=DEFAULT_RUN_SORT, help_text="order of the list"
    )


class PartFilterSerializer(serializers.Serializer):
    queue = serializers.ChoiceField(
        choices=Queue.choices, required=False, help_text="only the workers serving this queue"
    )


class RunUpdateSerializer(serializers.Serializer):
    tags = serializers.ListField(
        child=serializers.CharField(max_length=200, allow_blank=True),
        required=False,
        max_length=100,
        help_text="the run's tags, replacing the ones it has (at most 12, each at most 40 characters)",
    )
    note = serializers.CharField(required=False, allow_blank=True, max_length=5000, trim_whitespace=False)


class RunCancelSerializer(serializers.Serializer):
    result = serializers.ChoiceField(
        choices=[RunStatus.CANCELLED.value, "cancel_requested"],
        help_text=(
            "CANCELLED: a queued run was cancelled at once; cancel_requested: a worker's run stops within "
            "seconds, an external trainer at its next report"
        ),
    )
    run = RunDetailSerializer()


class CheckpointSerializer(serializers.ModelSerializer):
    path = serializers.SerializerMethodField(
        help_text="the checkpoint's directory on the server; null for members who may not launch runs"
    )

    class Meta:
        model = Checkpoint
        fields = ["id", "step", "path", "kind", "metrics", "created_at", "deleted"]

    def get_path(self, checkpoint: Checkpoint) -> str | None:
        return checkpoint.path if self.context.get("show_paths") else None


class CheckpointWeightsQuerySerializer(serializers.Serializer):
    file = serializers.CharField(
        required=False,
        max_length=300,
        help_text="which weights file (a path the 400 lists); by default the only one, or model.safetensors "
        "(a LoRA checkpoint's adapters merged into the base weights). `model.tar`: the whole model "
        "(weights, config, tokenizer) as one tar, a directory any run's `model` can name once unpacked",
    )


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
    schema = serializers.JSONField(
        help_text="JSON schema of the run config (every knob, its limits and default)"
    )
    groups = serializers.DictField(child=serializers.CharField(), help_text="knob group → section title")
    defaults = serializers.JSONField()


class RunContinueInputSerializer(serializers.Serializer):
    """Resume or fork: the checkpoint to start from (the latest kept one if omitted)."""

    checkpoint = fields.object_id(required=False, help_text="A checkpoint id of this run.")


class RunForkInputSerializer(RunContinueInputSerializer):
    name = fields.name(Run, required=False, allow_blank=True)
    overrides = OverridesField(
        required=False,
        help_text="The fork's complete knob overrides of the parent's preset; "
        "defaults to the parent's overrides.",
    )


class JudgeCheckInputSerializer(serializers.Serializer):
    environment = serializers.IntegerField(
        required=False, help_text="an environment of the project: its verifier is the truth"
    )
    queue = serializers.IntegerField(
        required=False, help_text="a preference queue of the project: its decided pairs are the truth"
    )

    def validate(self, attrs: dict) -> dict:
        if ("environment" in attrs) == ("queue" in attrs):
            raise serializers.ValidationError({"environment": ["Give either an environment or a queue."]})
        return attrs


class JudgeCheckSerializer(serializers.Serializer):
    criterion = serializers.CharField()
    untrusted = serializers.BooleanField(help_text="the judge cannot tell right from wrong")
    skipped = serializers.CharField(help_text="why it was not checked ('' when it was)")
    agreement = serializers.JSONField(
        allow_null=True,
        help_text="{n, accuracy, auc, kappa, right_judged_right, right_judged_wrong, wrong_judged_right, "
        "wrong_judged_wrong, threshold, source, scores, parse_failures, can_tell, verdict}",
    )
