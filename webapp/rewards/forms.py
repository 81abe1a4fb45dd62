"""Forms of the reward-model pages: what the browser posts, turned into one service call's arguments.
The rules (knob ranges, minimum pairs, rubric checks) live in the services and the knob schema."""

from __future__ import annotations

from django import forms

from trainers.learn.reward_training import TRAINING_SCHEMA
from webapp.core.dispatch import Queue
from webapp.experiments.models import Checkpoint, Rubric
from webapp.projects.models import Project
from webapp.rewards import selectors
from webapp.rewards.models import DEFAULT_ACCURACY_THRESHOLD

_KNOBS = TRAINING_SCHEMA["properties"]


def _help(name: str) -> str:
    return _KNOBS[name].get("description", "")


class TrainForm(forms.Form):
    snapshot = forms.ModelChoiceField(queryset=None, empty_label=None, label="Preference dataset")
    name = forms.CharField(max_length=120, label="Reward model name")
    head = forms.ChoiceField(
        choices=[(h, h) for h in _KNOBS["head"]["enum"]],
        initial=_KNOBS["head"]["default"],
        help_text=_help("head"),
    )
    epochs = forms.IntegerField(initial=_KNOBS["epochs"]["default"])
    held_out_fraction = forms.FloatField(
        initial=_KNOBS["held_out_fraction"]["default"],
        label="Held-out fraction",
        help_text=_help("held_out_fraction"),
    )
    seed = forms.IntegerField(initial=_KNOBS["seed"]["default"])
    base_checkpoint = forms.ModelChoiceField(
        queryset=Checkpoint.objects.none(),
        required=False,
        empty_label="the bundled model",
        label="Base model",
        help_text="The frozen model that embeds each pair: the bundled one, or the policy of a kept checkpoint "
        "(a GRPO run's, say) — the model whose answers the reward model will score.",
    )
    accuracy_threshold = forms.FloatField(
        required=False,
        initial=DEFAULT_ACCURACY_THRESHOLD,
        min_value=0.0,
        max_value=1.0,
        label="Reliable from held-out accuracy",
        help_text="Below this (or when the 95 % interval of the held-out accuracy includes 50 %) the model "
        "is marked not reliable, and adding it to a rubric needs an explicit override.",
    )
    queue = forms.ChoiceField(choices=Queue.choices, initial=Queue.CPU, label="Worker queue")

    def __init__(self, *args, project: Project, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        snapshots = selectors.trainable_snapshots(project=project)
        self.fields["snapshot"].queryset = snapshots
        # Never `str(snapshot)`: it names the queue, which annotators may not be allowed to see.
        self.fields["snapshot"].label_from_instance = lambda s: (
            f"dataset #{s.pk} · v{s.version} · {s.pair_count} pairs · {s.created_at:%Y-%m-%d %H:%M}"
        )
        self.fields["base_checkpoint"].queryset = selectors.base_checkpoints(project=project)
        self.fields["base_checkpoint"].label_from_instance = lambda c: f"{c.run.name} · step {c.step}"

    def threshold(self) -> float:
        value = self.cleaned_data.get("accuracy_threshold")
        return DEFAULT_ACCURACY_THRESHOLD if value is None else value

    def params(self) -> dict:
        return {key: self.cleaned_data[key] for key in ("head", "epochs", "held_out_fraction", "seed")}


class RegisterForm(forms.Form):
    rubric = forms.ModelChoiceField(queryset=None, empty_label=None)
    weight = forms.FloatField(initial=1.0)
    criterion_name = forms.CharField(
        max_length=80, required=False, label="Criterion name", help_text="Leave empty for <name>_v<version>."
    )
    only_when_checks_pass = forms.BooleanField(
        required=False,
        initial=True,
        label="Count it only when the checks pass",
        help_text="The reward model then ranks only the trajectories that pass the rubric's verifiable "
        "criteria (correctness, format, the environment's reward) and cannot pay the policy for failing "
        "them. Off, a policy can learn to please the model instead of doing the task.",
    )
    allow_unreliable = forms.BooleanField(
        required=False,
        label="Add it although it is not reliable",
        help_text="Only for a model marked not reliable: its held-out accuracy does not show it learned "
        "the preference, and its scores may reward the wrong thing.",
    )

    def __init__(self, *args, project: Project, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["rubric"].queryset = Rubric.objects.filter(project=project).order_by("name")
