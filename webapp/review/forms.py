"""Forms of the review pages. They turn what the browser posts into one service call's arguments; the
rules live in webapp.review.services."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.http import QueryDict

from trainers.sdk.wire import INT32_MAX
from webapp.core.dispatch import Queue
from webapp.experiments.models import Run
from webapp.projects.models import Membership, Project, Role
from webapp.review.explorer import (
    ANNOTATION_STATES,
    DEFAULT_PAGE_SIZE,
    DEFAULT_SORT,
    FILTER_KEYS,
    PAGE_SIZES,
    SORTS,
    ExplorerFilters,
)
from webapp.review.models import Choice, FlagReason, Pairing, PairSource, Tag
from webapp.review.selectors import judge_criteria
from webapp.review.services import DEFAULT_LOCK_SECONDS, MAX_COMMENT, MAX_OVERLAP, MAX_QUEUE_PAIRS
from webapp.rollouts.models import Split, TrajectoryStatus


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
    # A reply names the comment it answers; the view resolves it through access_comment.
    reply_to = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    # Past this many turns the turn is a number to type, not an option to pick: a select of 10,000 options
    # was most of a huge trajectory's page (bench/huge_trajectory.py).
    MAX_TURN_CHOICES = 200

    def __init__(self, *args, turn_indexes: list[int] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._turn_indexes = set(turn_indexes or [])
        if len(self._turn_indexes) > self.MAX_TURN_CHOICES:
            self.fields["turn_index"] = forms.IntegerField(
                required=False,
                label="On turn",
                min_value=0,
                max_value=max(self._turn_indexes),
                widget=forms.NumberInput(attrs={"placeholder": "whole trajectory"}),
            )
            return
        self.fields["turn_index"].choices = [("", "the whole trajectory")] + [
            (i, f"turn #{i}") for i in turn_indexes or []
        ]

    def clean_turn_index(self) -> int | None:
        value = self.cleaned_data.get("turn_index")
        if value is not None and value not in self._turn_indexes:
            raise forms.ValidationError("This trajectory has no such turn.")
        return value


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
    distinct_rewards = forms.BooleanField(
        required=False,
        initial=True,
        label="Skip pairs with equal rewards",
        help_text="On by default: two responses the reward scored alike are usually the same answer. "
        "Pairs whose responses are word for word identical are never offered.",
    )
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


class AdjudicationForm(forms.Form):
    """Settle a disagreement, in canonical A/B terms: the page shows the pair as A and B, since each voter
    saw it in their own left/right order."""

    choice = forms.ChoiceField(choices=Choice.choices, widget=forms.RadioSelect, label="Decision")
    rationale = forms.CharField(
        required=False, max_length=MAX_COMMENT, widget=forms.Textarea(attrs={"rows": 2}), label="Why"
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


# --- the trajectory explorer's query string (webapp.review.explorer) ---------------------------------


def _bound(label: str, placeholder: str, *, decimal: bool = False) -> forms.NumberInput:
    attrs = {"aria-label": label, "placeholder": placeholder}
    return forms.NumberInput(attrs={**attrs, "step": "any"} if decimal else attrs)


class ExplorerForm(forms.Form):
    """The explorer's query string. Runs and tags are looked up inside `project` only."""

    run = forms.TypedMultipleChoiceField(coerce=int, required=False, label="Runs")
    split = forms.ChoiceField(choices=[("", "Any split"), *Split.choices], required=False, label="Split")
    step_min = forms.IntegerField(
        min_value=0,
        max_value=INT32_MAX,
        required=False,
        label="Step from",
        widget=_bound("lowest step", "from"),
    )
    step_max = forms.IntegerField(
        min_value=0, max_value=INT32_MAX, required=False, label="Step to", widget=_bound("highest step", "to")
    )
    reward_min = forms.FloatField(
        required=False, label="Reward from", widget=_bound("lowest reward", "from", decimal=True)
    )
    reward_max = forms.FloatField(
        required=False, label="Reward to", widget=_bound("highest reward", "to", decimal=True)
    )
    length_min = forms.IntegerField(
        min_value=0,
        max_value=INT32_MAX,
        required=False,
        label="Response tokens from",
        widget=_bound("fewest response tokens", "from"),
    )
    length_max = forms.IntegerField(
        min_value=0,
        max_value=INT32_MAX,
        required=False,
        label="Response tokens to",
        widget=_bound("most response tokens", "to"),
    )
    criterion = forms.CharField(max_length=200, required=False, label="Criterion")
    criterion_value = forms.ChoiceField(
        choices=[("raw", "raw value"), ("weighted", "weighted value")],
        required=False,
        label="Criterion value",
        widget=forms.Select(attrs={"aria-label": "Which value of the criterion"}),
    )
    criterion_min = forms.FloatField(
        required=False, label="Criterion from", widget=_bound("lowest criterion value", "from", decimal=True)
    )
    criterion_max = forms.FloatField(
        required=False, label="Criterion to", widget=_bound("highest criterion value", "to", decimal=True)
    )
    status = forms.MultipleChoiceField(
        choices=TrajectoryStatus.choices, required=False, widget=forms.CheckboxSelectMultiple, label="Status"
    )
    tag = forms.ChoiceField(required=False, label="Tag")
    annotation = forms.ChoiceField(
        choices=[("", "Any annotation state"), *ANNOTATION_STATES], required=False, label="Annotation"
    )
    q = forms.CharField(max_length=500, required=False, strip=True, label="Text")
    sort = forms.ChoiceField(
        choices=[(name, sort.label) for name, sort in SORTS.items()], required=False, label="Sort"
    )
    page_size = forms.TypedChoiceField(
        choices=[(str(n), str(n)) for n in PAGE_SIZES],
        coerce=int,
        required=False,
        empty_value=DEFAULT_PAGE_SIZE,
        label="Per page",
    )

    def __init__(self, data: QueryDict | dict | None, *, project: Project):
        super().__init__(data)
        self.project = project
        # Plain choices from one query each: ModelChoiceField would iterate with a server-side cursor on
        # every render and query again to validate.
        runs = list(Run.objects.filter(project=project).order_by("-pk").values_list("pk", "name"))
        self.project_run_ids = tuple(pk for pk, _ in runs)
        self.fields["run"].choices = [(str(pk), f"{name} (#{pk})") for pk, name in runs]
        self.tag_ids = dict(Tag.objects.filter(project=project).values_list("name", "pk"))
        self.fields["tag"].choices = [("", "Any tag"), *((name, name) for name in sorted(self.tag_ids))]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        for low, high in (
            ("step_min", "step_max"),
            ("reward_min", "reward_max"),
            ("length_min", "length_max"),
            ("criterion_min", "criterion_max"),
        ):
            if (
                cleaned.get(low) is not None
                and cleaned.get(high) is not None
                and cleaned[low] > cleaned[high]
            ):
                self.add_error(high, "Must not be below the lower bound.")
        has_range = cleaned.get("criterion_min") is not None or cleaned.get("criterion_max") is not None
        if has_range and not cleaned.get("criterion"):
            self.add_error("criterion", "Name the criterion the range applies to.")
        return cleaned

    def submitted(self) -> dict[str, Any]:
        """What was submitted, as the page's controls show it again: strings, lists for multi-valued
        fields, and the defaults where nothing was given."""
        data = self.data
        values: dict[str, Any] = {name: data.get(name, "") for name in FILTER_KEYS}
        for name in ("run", "status"):
            values[name] = data.getlist(name) if hasattr(data, "getlist") else list(data.get(name) or [])
        values["sort"] = values["sort"] or DEFAULT_SORT
        values["page_size"] = values["page_size"] or str(DEFAULT_PAGE_SIZE)
        values["criterion_value"] = values["criterion_value"] or "raw"
        return values

    def error_list(self) -> list[str]:
        """Every error, prefixed by its field's label."""
        return [
            f"{self.fields[name].label}: {message}" if name in self.fields else str(message)
            for name, messages in self.errors.items()
            for message in messages
        ]

    def filters(self) -> ExplorerFilters:
        data = self.cleaned_data
        return ExplorerFilters(
            run_ids=tuple(sorted(data.get("run") or [])),
            project_run_ids=self.project_run_ids,
            split=data.get("split") or "",
            step_min=data.get("step_min"),
            step_max=data.get("step_max"),
            reward_min=data.get("reward_min"),
            reward_max=data.get("reward_max"),
            length_min=data.get("length_min"),
            length_max=data.get("length_max"),
            criterion=data.get("criterion") or "",
            criterion_value=data.get("criterion_value") or "raw",
            criterion_min=data.get("criterion_min"),
            criterion_max=data.get("criterion_max"),
            statuses=tuple(data.get("status") or ()),
            tag_id=self.tag_ids[data["tag"]] if data.get("tag") else None,
            annotation=data.get("annotation") or "",
            text=data.get("q") or "",
            sort=data.get("sort") or DEFAULT_SORT,
            page_size=data.get("page_size") or DEFAULT_PAGE_SIZE,
        )


class ActivityFilterForm(forms.Form):
    """The activity page's filters (GET): a kind of activity and a person; empty shows everything."""

    kind = forms.ChoiceField(required=False, label="Show", choices=[("", "everything")])
    person = forms.ChoiceField(required=False, label="by", choices=[("", "anyone")])

    def __init__(self, *args, people: list[str], **kwargs):
        from webapp.review.models import ActivityKind

        super().__init__(*args, **kwargs)
        self.fields["kind"].choices = [("", "everything"), *ActivityKind.choices]
        self.fields["person"].choices = [("", "anyone"), *((name, name) for name in people)]
