"""API serializers: output shapes, and input shapes that only coerce types (the services hold the rules)."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from webapp.api import fields
from webapp.api.serializers import username_field
from webapp.review.exports import EXPORT_FILES
from webapp.review.models import (
    Adjudication,
    Choice,
    Comment,
    PreferenceQueue,
    PreferenceSnapshot,
    TrajectoryTag,
)
from webapp.review.services.collaboration import MAX_COMMENT, MAX_TAG

# --- review: comments, tags, preference queues and datasets -------------------------------------------

EXPORT_FORMATS = tuple(EXPORT_FILES)


class CommentSerializer(serializers.ModelSerializer):
    author = username_field("author.username")
    deleted = serializers.BooleanField(
        source="is_deleted",
        read_only=True,
        help_text="deleted comments keep their place; their body is empty",
    )

    resolved_by = username_field("resolved_by.username")

    class Meta:
        model = Comment
        fields = [
            "id",
            "trajectory",
            "turn_index",
            "parent",
            "author",
            "body",
            "created_at",
            "edited_at",
            "deleted",
            "resolved_at",
            "resolved_by",
        ]
        extra_kwargs = {
            "parent": {"help_text": "the thread's first comment (null: this comment starts a thread)"},
            "resolved_at": {"help_text": "set on a thread's first comment once the thread is resolved"},
        }


class CommentInputSerializer(serializers.Serializer):
    body = serializers.CharField(
        max_length=MAX_COMMENT, help_text="plain text; @username notifies that member"
    )
    turn_index = fields.count(
        required=False, allow_null=True, help_text="comment on one turn of the trajectory"
    )
    reply_to = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        help_text="reply in the thread of this comment (its author is notified; the thread's turn is kept)",
    )


class ThreadResolveSerializer(serializers.Serializer):
    resolved = serializers.BooleanField(default=True, help_text="false opens the thread again")


class TrajectoryTagSerializer(serializers.ModelSerializer):
    name = serializers.CharField(source="tag.name", read_only=True)
    color = serializers.CharField(source="tag.color", read_only=True)
    added_by = username_field("added_by.username")

    class Meta:
        model = TrajectoryTag
        fields = ["name", "color", "added_by", "added_at"]


class TagInputSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=MAX_TAG, help_text="the project's tag of this name (any case) is reused"
    )


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
        child=serializers.IntegerField(),
        allow_null=True,
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


class PositionBiasSerializer(serializers.Serializer):
    rater = serializers.CharField()
    order = serializers.CharField(
        help_text='"" for a person (and a judge over both orders); "A first" / "B first"'
    )
    decisive = serializers.IntegerField(help_text="judgements that picked a side")
    left = serializers.IntegerField(help_text="of those, the left one (a judge: the response shown first)")
    right = serializers.IntegerField()
    undecided = serializers.IntegerField(help_text="ties, both bad; a judge's replies that named neither")
    left_share = serializers.FloatField(allow_null=True, help_text="left / decisive; 0.5 is no bias")
    p_value = serializers.FloatField(allow_null=True, help_text="exact two-sided binomial test against 0.5")


class OrderConsistencySerializer(serializers.Serializer):
    judge = serializers.CharField()
    items = serializers.IntegerField(help_text="pairs with a readable answer in both orders")
    consistent = serializers.IntegerField(
        help_text="of those, pairs where both orders picked the same response"
    )
    share = serializers.FloatField(allow_null=True)


class AgreementSerializer(serializers.Serializer):
    raters = serializers.ListField(child=serializers.CharField())
    pairs = PairwiseAgreementSerializer(many=True, help_text="every two raters")
    cohen = PairwiseAgreementSerializer(allow_null=True, help_text="when exactly two people judged")
    fleiss = serializers.FloatField(
        allow_null=True, help_text="Fleiss' kappa over the pairs with all judgements"
    )
    fleiss_items = serializers.IntegerField()
    fleiss_raters = serializers.IntegerField()
    judge = JudgeAgreementSerializer(allow_null=True, help_text="human majority vs the LLM judge component")
    judges = JudgeAgreementSerializer(
        many=True, help_text="LLM judges that annotated the queue, each vs the human majority"
    )
    judge_raters = serializers.ListField(
        child=serializers.CharField(), help_text="which of `raters` are LLM judges"
    )
    position_bias = PositionBiasSerializer(many=True)
    order_consistency = OrderConsistencySerializer(many=True)


class PreferenceQueueSerializer(serializers.ModelSerializer):
    created_by = username_field()
    total_pairs = serializers.IntegerField(read_only=True)
    done_pairs = serializers.IntegerField(read_only=True, help_text="pairs with all `overlap` judgements")

    class Meta:
        model = PreferenceQueue
        fields = [
            "id",
            "name",
            "source",
            "pairing",
            "overlap",
            "rationale_required",
            "created_by",
            "created_at",
            "total_pairs",
            "done_pairs",
        ]


class PreferenceQueueDetailSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = username_field()
    runs = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    annotators = serializers.SlugRelatedField(slug_field="username", many=True, read_only=True)
    may_annotate = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()
    agreement = serializers.SerializerMethodField(
        help_text="null unless you may launch (researchers, owners)"
    )

    class Meta:
        model = PreferenceQueue
        fields = [
            "id",
            "project",
            "name",
            "instructions",
            "source",
            "pairing",
            "distinct_rewards",
            "build_params",
            "runs",
            "annotators",
            "overlap",
            "rationale_required",
            "lock_seconds",
            "created_by",
            "created_at",
            "may_annotate",
            "progress",
            "agreement",
        ]

    def get_may_annotate(self, queue: PreferenceQueue) -> bool:
        return self.context["may_annotate"]

    @extend_schema_field(QueueProgressSerializer)
    def get_progress(self, queue: PreferenceQueue) -> dict:
        progress = self.context["progress"]
        body = {
            **vars(progress),
            "percent": progress.percent,
            "annotators": [vars(row) for row in progress.annotators],
        }
        if self.context["agreement"] is None:
            body["choices"] = None  # annotators do not see how the others voted
        return QueueProgressSerializer(body).data

    @extend_schema_field(AgreementSerializer(allow_null=True))
    def get_agreement(self, queue: PreferenceQueue) -> dict | None:
        summary = self.context["agreement"]
        if summary is None:
            return None
        return AgreementSerializer(
            {
                "raters": summary.raters,
                # The summary keeps each cell under both (x, y) and (y, x): list every two raters once.
                "pairs": [
                    vars(cell) for (first, second), cell in sorted(summary.cells.items()) if first < second
                ],
                "cohen": vars(summary.cohen) if summary.cohen else None,
                "fleiss": summary.fleiss,
                "fleiss_items": summary.fleiss_items,
                "fleiss_raters": summary.fleiss_raters,
                "judge": vars(summary.judge) if summary.judge else None,
                "judges": [vars(row) for row in summary.judges],
                "judge_raters": summary.judge_raters,
                "position_bias": summary.bias,
                "order_consistency": summary.consistency,
            }
        ).data


class ExportUrlsSerializer(serializers.Serializer):
    dpo = serializers.CharField()
    parquet = serializers.CharField()


class PreferenceSnapshotSerializer(serializers.ModelSerializer):
    created_by = username_field()
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
    include_turns = serializers.BooleanField(
        default=False,
        help_text="add step-level rows from the turn judgements on the queue's trajectories (for a reward "
        "model scored per turn; docs/review.md, Per-turn preferences)",
    )


class SnapshotExportQuerySerializer(serializers.Serializer):
    format = serializers.ChoiceField(
        choices=EXPORT_FORMATS,
        default="dpo",
        help_text="dpo: JSON lines in TRL's conversational preference format {prompt, chosen, rejected "
        "(chat messages), chosen_reward, rejected_reward, provenance}; dpo-text: the same rows with "
        "prompt and responses as plain strings, both sides rendered alike; parquet: the same rows, provenance flattened into columns",
        error_messages={"invalid_choice": f'Unknown format "{{input}}": one of {", ".join(EXPORT_FORMATS)}.'},
    )


# --- per-turn preferences ------------------------------------------------------------------------------


class TurnJudgementSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    trajectory = serializers.IntegerField(source="trajectory_id")
    turn_index = serializers.IntegerField()
    verdict = serializers.CharField(
        help_text="wrong: the trajectory went wrong here; better: this turn beats `other`'s"
    )
    other = serializers.IntegerField(source="other_id", allow_null=True)
    other_turn_index = serializers.IntegerField(allow_null=True)
    annotator = username_field("annotator.username")
    created_at = serializers.DateTimeField()


class TurnJudgementsSerializer(serializers.Serializer):
    turn_rewards = serializers.DictField(
        child=serializers.FloatField(),
        help_text="judged per-turn reward per assistant turn (index → value in [−1, 1]), attributed from the judgements",
    )
    judgements = TurnJudgementSerializer(many=True)


class TurnJudgementInputSerializer(serializers.Serializer):
    verdict = serializers.ChoiceField(choices=["wrong", "better"])
    turn_index = fields.count(help_text="the judged assistant turn of this trajectory")
    other = fields.object_id(
        required=False, help_text="better: the trajectory whose turn this one beats (same task)"
    )
    other_turn_index = fields.count(
        required=False, help_text="better: the other trajectory's turn (the same point: the same index)"
    )


# --- disagreements and adjudication ---------------------------------------------------------------------


class VoteSerializer(serializers.Serializer):
    voter = serializers.CharField(help_text="a username, or an LLM judge's label")
    choice = serializers.ChoiceField(choices=Choice.choices, help_text="canonical: a, b, tie, both_bad")
    rationale = serializers.CharField(allow_blank=True)
    is_judge = serializers.BooleanField()
    side = serializers.CharField(help_text="the choice as the voter saw it: left, right, tie or both_bad")


class AdjudicationSerializer(serializers.ModelSerializer):
    adjudicated_by = username_field("adjudicated_by.username")
    overridden = serializers.JSONField(help_text="the votes as they stood: [{annotator, choice, rationale}]")

    class Meta:
        model = Adjudication
        fields = ["choice", "rationale", "adjudicated_by", "adjudicated_at", "overridden"]


class DecisionSerializer(serializers.Serializer):
    outcome = serializers.ChoiceField(
        choices=["a", "b", "tie", "both_bad", "no_majority"],
        help_text="what a snapshot exports: a or b as chosen; otherwise why the pair is left out",
    )
    adjudicated = serializers.BooleanField()


class DisagreementSerializer(serializers.Serializer):
    pair = serializers.IntegerField(source="pair.pk")
    position = serializers.IntegerField(source="pair.position")
    a = serializers.IntegerField(source="pair.a_id", help_text="trajectory id of response A")
    b = serializers.IntegerField(source="pair.b_id", help_text="trajectory id of response B")
    votes = VoteSerializer(many=True)
    decision = DecisionSerializer()
    adjudication = AdjudicationSerializer(allow_null=True)


class DisagreementsSerializer(serializers.Serializer):
    open = serializers.IntegerField(help_text="split pairs nobody settled yet")
    settled = serializers.IntegerField()
    kappa_kind = serializers.CharField(help_text="Cohen's κ (two people), Fleiss' κ, or empty: no κ applies")
    kappa_before = serializers.FloatField(allow_null=True, help_text="as the people voted")
    kappa_after = serializers.FloatField(
        allow_null=True, help_text="with every settled pair's votes replaced by its decision"
    )
    pairs = DisagreementSerializer(many=True)


class AdjudicationInputSerializer(serializers.Serializer):
    choice = serializers.ChoiceField(choices=Choice.choices, help_text="canonical: a, b, tie, both_bad")
    rationale = serializers.CharField(required=False, allow_blank=True, default="", max_length=MAX_COMMENT)


class DisagreementsQuerySerializer(serializers.Serializer):
    show = serializers.ChoiceField(choices=["open", "settled", "all"], default="open")
