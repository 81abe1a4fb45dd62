"""Forms of the review pages. They turn what the browser posts into one service call's arguments; the
rules live in webapp.review.services."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model

from webapp.core.dispatch import Queue
from webapp.experiments.models import Run
from webapp.projects.models import Membership, Project, Role
from webapp.review.models import FlagReason, Pairing, PairSource
from webapp.review.selectors import judge_criteria
from webapp.review.services import DEFAULT_LOCK_SECONDS, MAX_COMMENT, MAX_OVERLAP, MAX_QUEUE_PAIRS
from webapp.rollouts.models import Split


class CommentForm(forms.Form):
    body = forms.CharField(
        max_length=MAX_COMMENT,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Comment",
        help_text="@username notifies a project member.",
    )
    turn_index = forms.TypedChoiceField(
        required=False, coerce=int, empty_value=None, label="On", choices=[("", "the whole trajectory")]
    )

    def __init__(self, *args, turn_indexes: list[int] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["turn_index"].choices = [("", "the whole trajectory")] + [
            (i, f"turn #{i}") for i in turn_indexes or []
        ]


class TagForm(forms.Form):
    name = forms.CharField(max_length=50, label="Tag")


class FlagForm(forms.Form):
    reason = forms.ChoiceField(choices=FlagReason.choices)
    note = forms.CharField(required=False, max_length=MAX_COMMENT, widget=forms.Textarea(attrs={"rows": 2}))


class RunChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj: Run) -> str:
        return f"{obj.name} (#{obj.pk}, step {obj.current_step}, {obj.get_status_display().lower()})"


class UserChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj) -> str:
        return obj.username


def _steps(text: str) -> list[int]:
    """ "10, 20, 30-50" → [10, 20, 30, …, 50]."""
    steps: set[int] = set()
    for part in filter(None, (p.strip() for p in text.replace(" ", ",").split(","))):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise forms.ValidationError(f"{part!r} is not a step or a range like 10-50.")
        first, last = int(low), int(high) if dash else int(low)
        if last < first or last - first > 100_000:
            raise forms.ValidationError(f"{part!r} is not a sensible range.")
        steps.update(range(first, last + 1))
    return sorted(steps)


def annotating_members(project: Project):
    member_ids = Membership.objects.filter(
        project=project, role__in=[Role.OWNER, Role.RESEARCHER, Role.ANNOTATOR]
    ).values("user_id")
    return get_user_model().objects.filter(pk__in=member_ids).order_by("username")


class AnnotatorsForm(forms.Form):
    annotators = UserChoiceField(
        queryset=get_user_model().objects.none(), widget=forms.CheckboxSelectMultiple
    )

    def __init__(self, *args, project: Project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["annotators"].queryset = annotating_members(project)


class QueueForm(forms.Form):
    name = forms.CharField(max_length=120)
    runs = RunChoiceField(queryset=Run.objects.none(), widget=forms.CheckboxSelectMultiple)
    source = forms.ChoiceField(
        choices=PairSource.choices, widget=forms.RadioSelect, initial=PairSource.GROUP, label="Pairs from"
    )
    pairing = forms.ChoiceField(
        choices=Pairing.choices,
        initial=Pairing.ALL,
        help_text="Best vs worst applies to groups, earliest vs latest to evaluation tasks.",
    )
    split = forms.ChoiceField(
        choices=Split.choices,
        initial=Split.TRAIN,
        help_text="Groups of this split (evaluation-task pairs always use the evaluation split).",
    )
    steps = forms.CharField(
        required=False, help_text="Only these steps, e.g. “0, 100, 200” or “50-100” (empty: all)."
    )
    distinct_rewards = forms.BooleanField(required=False, label="Skip pairs with equal rewards")
    max_pairs = forms.IntegerField(
        min_value=1,
        max_value=MAX_QUEUE_PAIRS,
        initial=500,
        help_text="More candidate pairs are sampled down to this many.",
    )
    annotators = UserChoiceField(
        queryset=get_user_model().objects.none(), widget=forms.CheckboxSelectMultiple
    )
    overlap = forms.IntegerField(
        min_value=1,
        max_value=MAX_OVERLAP,
        initial=1,
        help_text="Judgements wanted per pair (different annotators).",
    )
    instructions = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 4}), help_text="Shown above every pair."
    )
    rationale_required = forms.BooleanField(required=False, label="Require a rationale with every judgement")
    lock_minutes = forms.IntegerField(
        min_value=1,
        max_value=24 * 60,
        initial=DEFAULT_LOCK_SECONDS // 60,
        help_text="How long a pair stays reserved for the annotator who opened it.",
    )

    def __init__(self, *args, project: Project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["runs"].queryset = Run.objects.filter(project=project).order_by("-created_at", "-pk")
        self.fields["annotators"].queryset = annotating_members(project)

    def clean_steps(self) -> list[int] | None:
        return _steps(self.cleaned_data.get("steps") or "") or None

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        return {
            "name": data["name"],
            "runs": list(data["runs"]),
            "annotators": list(data["annotators"]),
            "source": data["source"],
            "pairing": data["pairing"],
            "split": data["split"],
            "steps": data["steps"],
            "distinct_rewards": data["distinct_rewards"],
            "max_pairs": data["max_pairs"],
            "overlap": data["overlap"],
            "instructions": data["instructions"],
            "rationale_required": data["rationale_required"],
            "lock_seconds": data["lock_minutes"] * 60,
        }


class JudgementForm(forms.Form):
    SIDES = [
        ("left", "Left is better"),
        ("right", "Right is better"),
        ("tie", "Tie"),
        ("both_bad", "Both bad"),
    ]
    choice = forms.ChoiceField(choices=SIDES, widget=forms.RadioSelect)
    rationale = forms.CharField(
        required=False, max_length=MAX_COMMENT, widget=forms.Textarea(attrs={"rows": 2})
    )


class JudgeForm(forms.Form):
    """Ask an LLM-judge criterion of a project rubric to annotate the queue."""

    criterion = forms.ChoiceField(
        label="LLM-judge criterion",
        help_text="From the latest version of each project rubric; the criterion's model answers.",
    )
    in_snapshots = forms.BooleanField(
        required=False,
        label="Count its verdicts in dataset snapshots",
        help_text="Off: the judge is only compared with the annotators. On: one more vote per pair.",
    )
    worker_queue = forms.ChoiceField(choices=Queue.choices, initial=Queue.CPU, label="Worker queue")

    def __init__(self, *args, project: Project, **kwargs):
        super().__init__(*args, **kwargs)
        self.options = {option.key: option for option in judge_criteria(project)}
        self.fields["criterion"].choices = [(key, option.label) for key, option in self.options.items()]

    def service_arguments(self) -> dict:
        option = self.options[self.cleaned_data["criterion"]]
        return {
            "rubric_version": option.rubric_version,
            "criterion_name": option.name,
            "in_snapshots": self.cleaned_data["in_snapshots"],
            "worker_queue": self.cleaned_data["worker_queue"],
        }
