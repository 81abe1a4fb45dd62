"""Forms of the experiments pages: environment editor, rubric builder, run launcher.

Each editor turns what the browser posts into the arguments of one service call, and shows the
service's field-path errors (`config.max_turns`, `criteria.1.weight`) next to the fields concerned.
The rules themselves live in the JSON schemas and the services, never here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from trainers.config import (
    DEFAULT_MODEL,
    KNOB_GROUPS,
    PRESET_TITLES,
    PRESETS,
    RUN_CONFIG_SCHEMA,
    recommended_knobs,
    resolve_run_config,
)
from trainers.registry import (
    UnknownKind,
    config_with_defaults,
    criterion_kind,
    criterion_kinds,
    environment_kind,
    environment_kinds,
)
from trainers.rubrics import AGGREGATIONS, describe_path
from webapp.core.dispatch import Queue
from webapp.experiments.models import Environment, EnvironmentVersion, Rubric
from webapp.experiments.parts import run_form_schema
from webapp.experiments.schema_forms import SchemaForm
from webapp.projects.models import Project


def _kind_choices(kinds: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(name, f"{spec.title} ({name})") for name, spec in kinds.items()]


def _route_errors(
    errors: Mapping[str, list[str]], forms_by_prefix: Mapping[str, Any], main: forms.Form
) -> None:
    """Send each `path: messages` to the form that shows it: a SchemaForm registered under the path's
    first segment (`config` → config form), else the main form's field of that name, else the top."""
    for path, messages in errors.items():
        head, _, rest = path.partition(".")
        schema_form = forms_by_prefix.get(head)
        if schema_form is not None:
            schema_form.add_schema_errors({rest: messages})
        elif path in main.fields:
            main.add_error(path, list(messages))
        else:
            main.add_error(None, [f"{path}: {m}" if path else m for m in messages])


def _route_remaining(
    errors: Mapping[str, list[str]], forms_by_prefix: Mapping[str, Any], main: forms.Form
) -> None:
    """As _route_errors, but skip errors on fields that already show one (a value that did not parse
    keeps its own message): the second half of showing every error in one pass."""
    fresh: dict[str, list[str]] = {}
    for path, messages in errors.items():
        head, _, rest = path.partition(".")
        target = forms_by_prefix.get(head)
        if target is not None:
            field = target.field_for_path(rest) if hasattr(target, "field_for_path") else "params"
            if field is not None and field in target.errors:
                continue
        elif path in main.fields and path in main.errors:
            continue
        fresh[path] = list(messages)
    _route_errors(fresh, forms_by_prefix, main)


def _cleaned(form: forms.Form) -> dict[str, Any]:
    return getattr(form, "cleaned_data", {}) or {}


# --- environments ------------------------------------------------------------------------------------


class EnvironmentForm(forms.Form):
    name = forms.CharField(max_length=120, required=False)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    kind = forms.ChoiceField(
        choices=(), help_text="What the model is asked to do; the settings below depend on it."
    )
    note = forms.CharField(
        max_length=200, required=False, help_text="What changed, kept with the new version (optional)."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["kind"].choices = _kind_choices(environment_kinds())


def environment_config_form(
    kind: str, data: Mapping[str, Any] | None = None, values: Mapping[str, Any] | None = None
) -> SchemaForm | None:
    """The config form of an environment kind, or None for a kind that is not registered."""
    try:
        spec = environment_kind(kind)
    except UnknownKind:
        return None
    return SchemaForm(spec.config_schema, data, values=values, prefix="config")


class EnvironmentEditor:
    """The environment page's two forms: name/kind/note and the kind's generated config form."""

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        initial: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        initial = dict(initial or {})
        initial.setdefault("kind", next(iter(environment_kinds())))
        self.form = EnvironmentForm(data, initial=initial)
        kind = data.get("kind", "") if data is not None else initial["kind"]
        self.config_form = environment_config_form(kind, data, values=config)

    def is_valid(self) -> bool:
        form_ok = self.form.is_valid()
        return form_ok and self.config_form is not None and self.config_form.is_valid()

    def values(self, *, previous: EnvironmentVersion | None = None) -> dict[str, Any]:
        """The service's arguments. A config equal to `previous`'s once defaults are filled in is
        `previous`'s own, so saving an untouched form does not make a new version."""
        data = self.form.cleaned_data
        config = self.config_form.values()
        if previous is not None and previous.kind == data["kind"]:
            schema = self.config_form.schema
            if config_with_defaults(schema, config) == config_with_defaults(schema, previous.config):
                config = previous.config
        return {
            "name": data["name"],
            "description": data["description"],
            "kind": data["kind"],
            "config": config,
        }

    def add_service_errors(self, error: ValidationError) -> None:
        targets = {"config": self.config_form} if self.config_form is not None else {}
        _route_errors(error.message_dict, targets, self.form)

    def partial_values(self) -> dict[str, Any]:
        """After a failed is_valid(): the values that did parse, to check the rest in the same pass."""
        data = _cleaned(self.form)
        config = self.config_form.values() if self.config_form is not None else {}
        return {"name": data.get("name", ""), "kind": data.get("kind", ""), "config": config}

    def add_remaining_errors(self, errors: Mapping[str, list[str]]) -> None:
        targets = {"config": self.config_form} if self.config_form is not None else {}
        _route_remaining(errors, targets, self.form)


# --- rubrics -----------------------------------------------------------------------------------------

CRITERION_PREFIX = "criteria"
_ROW_KEY = re.compile(rf"^{CRITERION_PREFIX}-(\d+)-(?:name|kind)$")


class CriterionForm(forms.Form):
    name = forms.CharField(max_length=100, required=False)
    # A text value rendered as a select: an unknown kind is reported by the rubric validator on this
    # row, and the row keeps what was posted.
    kind = forms.CharField(widget=forms.Select())
    weight = forms.FloatField(widget=forms.NumberInput(attrs={"min": 0, "step": "any"}))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = _kind_choices(criterion_kinds())
        posted_kind = self["kind"].value()
        if posted_kind and posted_kind not in criterion_kinds():
            choices.append((posted_kind, f"{posted_kind} (unknown)"))
        self.fields["kind"].widget.choices = choices


class ParamsJsonForm(forms.Form):
    """Fallback params editor for a kind without a registered schema: the params as JSON."""

    params = forms.JSONField(
        required=False,
        label="Parameters (JSON)",
        widget=forms.Textarea(attrs={"rows": 3, "class": "json"}),
        help_text="A JSON object.",
    )

    def values(self) -> Any:
        value = self.cleaned_data.get("params")
        return {} if value is None else value

    def add_schema_errors(self, errors: Mapping[str, list[str]]) -> None:
        for path, messages in errors.items():
            self.add_error("params", [f"{path}: {m}" if path else m for m in messages])


# The rubric page's <datalist> of the judge models the workers serve (webapp.experiments.judges): an
# llm_judge row's model field offers them and still takes a name typed in (an endpoint's model).
JUDGE_MODELS_DATALIST = "judge-models"


def criterion_params_form(
    kind: str, prefix: str, data: Mapping[str, Any] | None = None, values: Mapping[str, Any] | None = None
) -> SchemaForm | ParamsJsonForm:
    try:
        spec = criterion_kind(kind)
    except UnknownKind:
        return ParamsJsonForm(data, initial={"params": dict(values or {})}, prefix=prefix)
    form = SchemaForm(spec.config_schema, data, values=values, prefix=prefix)
    if kind == "llm_judge" and "model" in form.fields:
        form.fields["model"].widget.attrs["list"] = JUDGE_MODELS_DATALIST
    return form


class CriterionRow:
    """One row of the rubric builder: name/kind/weight and the params form of its kind."""

    def __init__(
        self, index: int | str, data: Mapping[str, Any] | None = None, item: Mapping[str, Any] | None = None
    ):
        self.prefix = f"{CRITERION_PREFIX}-{index}"
        # Shown on the row ("#2") so errors that name "Criterion 2" point at it; rubric_builder.js
        # renumbers it with the rows.
        self.number = index + 1 if isinstance(index, int) else ""
        item = item or {}
        initial = {
            "name": item.get("name", ""),
            "kind": item.get("kind", "exact_match"),
            "weight": item.get("weight", 1.0),
        }
        self.form = CriterionForm(data, initial=initial, prefix=self.prefix)
        kind = self.form["kind"].value() or ""
        self.kind = kind
        self.kind_spec = criterion_kinds().get(kind)
        self.params = criterion_params_form(kind, f"{self.prefix}-params", data, values=item.get("params"))

    def is_valid(self) -> bool:
        form_ok = self.form.is_valid()
        return self.params.is_valid() and form_ok

    def value(self, previous_params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The criterion as the spec stores it; params equal to `previous_params` once defaults are
        filled in are kept as they were (an untouched row changes nothing)."""
        data = self.form.cleaned_data
        params = self.params.values()
        if previous_params is not None and self.kind_spec is not None:
            schema = self.kind_spec.config_schema
            if config_with_defaults(schema, params) == config_with_defaults(schema, previous_params):
                params = dict(previous_params)
        return {
            "name": data["name"].strip(),
            "kind": data["kind"],
            "weight": data["weight"],
            "params": params,
        }

    def add_errors(self, errors: Mapping[str, list[str]]) -> None:
        _route_errors(errors, {"params": self.params}, self.form)

    @property
    def has_errors(self) -> bool:
        return bool(self.form.errors or self.params.errors)


class RubricForm(forms.Form):
    name = forms.CharField(max_length=120, required=False)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    aggregation = forms.ChoiceField(
        choices=[(a, a) for a in AGGREGATIONS],
        help_text="weighted_sum: Σ weight × raw value. group_normalized_sum: Σ weight × z, each criterion "
        "standardised across the rollouts of one task.",
    )
    note = forms.CharField(
        max_length=200, required=False, help_text="What changed, kept with the new version (optional)."
    )


class RubricBuilder:
    """The rubric page: a RubricForm plus one CriterionRow per criterion.

    Rows post as `criteria-<i>-name`, `criteria-<i>-kind`, `criteria-<i>-weight` and
    `criteria-<i>-params-<param>`; rubric_builder.js renumbers them after adding, removing or moving a
    row, and the spec lists them in index order.
    """

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        initial: Mapping[str, Any] | None = None,
        spec: Mapping[str, Any] | None = None,
    ) -> None:
        spec = spec or {
            "aggregation": "weighted_sum",
            "criteria": [{"name": "correct", "kind": "exact_match"}],
        }
        initial = {"aggregation": spec.get("aggregation", "weighted_sum"), **(initial or {})}
        self.form = RubricForm(data, initial=initial)
        if data is not None:
            indices = sorted({int(m.group(1)) for key in data if (m := _ROW_KEY.match(key))})
            self.rows = [CriterionRow(i, data) for i in indices]
        else:
            self.rows = [CriterionRow(i, item=item) for i, item in enumerate(spec.get("criteria", []))]
        self.blank_row = CriterionRow("__prefix__")

    def is_valid(self) -> bool:
        results = [self.form.is_valid(), *(row.is_valid() for row in self.rows)]
        return all(results)

    def spec(self, *, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The spec the rows describe. Against `previous` (the stored spec), a row whose name and
        kind match a stored criterion keeps that criterion's params if they mean the same."""
        stored = {
            (c.get("name"), c.get("kind")): c.get("params", {}) for c in (previous or {}).get("criteria", [])
        }
        criteria = []
        for row in self.rows:
            key = (row.form.cleaned_data["name"].strip(), row.form.cleaned_data["kind"])
            criteria.append(row.value(stored.get(key)))
        return {"aggregation": self.form.cleaned_data["aggregation"], "criteria": criteria}

    def values(self, *, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
        data = self.form.cleaned_data
        return {
            "name": data["name"],
            "description": data["description"],
            "spec": self.spec(previous=previous),
        }

    def add_service_errors(self, error: ValidationError) -> None:
        per_row: dict[int, dict[str, list[str]]] = {}
        top: dict[str, list[str]] = {}
        for path, messages in error.message_dict.items():
            match = re.match(r"^criteria\.(\d+)(?:\.(.*))?$", path)
            if match and int(match.group(1)) < len(self.rows):
                per_row.setdefault(int(match.group(1)), {})[match.group(2) or ""] = messages
            else:
                top[path] = messages
        for index, errors in per_row.items():
            self.rows[index].add_errors(errors)
        _route_errors(top, {}, self.form)

    def partial_spec(self) -> dict[str, Any]:
        """After a failed is_valid(): the spec of what did parse (a field that did not is left out and
        keeps its own error), to check the rest — names, kinds, parameters — in the same pass."""
        criteria = []
        for row in self.rows:
            data = _cleaned(row.form)
            item: dict[str, Any] = {"name": (data.get("name") or "").strip(), "kind": row.kind}
            if "weight" in data and data["weight"] is not None:
                item["weight"] = data["weight"]
            item["params"] = row.params.values() if hasattr(row.params, "cleaned_data") else {}
            criteria.append(item)
        return {"aggregation": _cleaned(self.form).get("aggregation", "weighted_sum"), "criteria": criteria}

    def add_remaining_errors(self, errors: Mapping[str, list[str]]) -> None:
        top: dict[str, list[str]] = {}
        for path, messages in errors.items():
            match = re.match(r"^criteria\.(\d+)(?:\.(.*))?$", path)
            if match and int(match.group(1)) < len(self.rows):
                row = self.rows[int(match.group(1))]
                _route_remaining({match.group(2) or "": messages}, {"params": row.params}, row.form)
            else:
                top[path] = list(messages)
        _route_remaining(top, {}, self.form)

    def error_messages(self) -> list[str]:
        """Every error of the builder as "where: message", a criterion named by its row number
        ("Criterion 2 · weight: Enter a number.")."""
        found = [
            f"{field}: {m}" if field != "__all__" else m for field, ms in self.form.errors.items() for m in ms
        ]
        for index, row in enumerate(self.rows):
            for prefix, errors in (
                (f"criteria.{index}", row.form.errors),
                (f"criteria.{index}.params", row.params.errors),
            ):
                for field, messages in errors.items():
                    path = prefix if field == "__all__" else f"{prefix}.{field}"
                    found += [f"{describe_path(path)}: {m}" for m in messages]
        return found


class RubricPreviewForm(forms.Form):
    """Score with the unsaved rubric either a pasted transcript or any trajectory of the project: typed by
    id ("812", "#812") or found by its task text, the picker's options (a datalist the page refreshes from
    `search_url` as one types: webapp.rollouts.selectors.preview_trajectory_options) being "#id · task · …"."""

    trajectory = forms.CharField(
        required=False,
        max_length=300,
        label="A trajectory of this project",
        help_text="Type its id or words of its task to find it (the newest are listed); leave empty to use "
        "the transcript.",
    )
    transcript = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8}),
        strip=False,
        required=False,
        help_text="Lines like 'user: …' and 'assistant: …', or a JSON list of {role, text} turns.",
    )
    answer = forms.CharField(
        required=False,
        label="Expected answer",
        help_text="The task's answer, for a pasted transcript (a picked trajectory is scored with its own).",
    )

    prefix = "preview"
    OPTIONS_ID = "preview-trajectory-options"

    def __init__(self, *args: Any, search_url: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.options: list[tuple[int, str]] = []  # the picker's first options (the page fills them)
        attrs = {"list": self.OPTIONS_ID, "autocomplete": "off", "placeholder": "812, or words of the task"}
        if search_url:  # htmx: refresh the options as one types (the options list is the target)
            attrs.update(
                {
                    "hx-get": search_url,
                    "hx-trigger": "input changed delay:250ms",
                    "hx-target": f"#{self.OPTIONS_ID}",
                    "hx-swap": "innerHTML",
                }
            )
        self.fields["trajectory"].widget.attrs.update(attrs)

    def clean_trajectory(self) -> int | None:
        """The id at the start of what was typed or picked ("812", "#812 · What is…"); None when empty."""
        value = (self.cleaned_data.get("trajectory") or "").strip()
        if not value:
            return None
        found = re.match(r"#?(\d+)(\s|·|$)", value)
        if not found:
            raise ValidationError(
                "Pick a trajectory from the list or type its id: “%(value)s” names none.",
                params={"value": value[:80]},
            )
        return int(found.group(1))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not data.get("trajectory") and not (data.get("transcript") or "").strip() and not self.errors:
            self.add_error("transcript", "Paste a transcript or pick a trajectory.")
        return data


# --- runs ----------------------------------------------------------------------------------------------

# Knobs not typed on the run form: the preset has its own select, and the environment and rubric come
# from the chosen objects' pinned versions.
RUN_FORM_EXCLUDED_KNOBS = ("preset", "environment", "rubric")


class RunForm(forms.Form):
    name = forms.CharField(max_length=120, required=False)
    environment = forms.ModelChoiceField(queryset=Environment.objects.none(), empty_label=None)
    rubric = forms.ModelChoiceField(queryset=Rubric.objects.none(), empty_label=None)
    preset = forms.ChoiceField(
        choices=[(name, PRESET_TITLES.get(name, name)) for name in PRESETS],
        help_text="Choosing a preset fills the algorithm knobs below; what you change afterwards is "
        "stored as overrides.",
    )
    queue = forms.ChoiceField(choices=Queue.choices, initial=Queue.CPU, help_text="Which workers run it.")

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["environment"].queryset = Environment.objects.filter(project=project)
        self.fields["rubric"].queryset = Rubric.objects.filter(project=project)


def preset_knob_values() -> dict[str, dict[str, Any]]:
    """Each preset's full knob set (defaults ← preset), keyed by preset name."""
    return {name: resolve_run_config(name, {}) for name in PRESETS}


def overrides_from(preset: str, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs that differ from the preset: what the run stores as `overrides`.

    `lora` merges key by key in resolve_run_config, so only its changed keys are kept."""
    base = resolve_run_config(preset, {})
    overrides: dict[str, Any] = {}
    for key, value in knobs.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            changed = {k: v for k, v in value.items() if base[key].get(k) != v}
            if changed:
                overrides[key] = changed
        elif key not in base or base[key] != value:
            overrides[key] = value
    return overrides


class RunLauncher:
    """The run page: a RunForm plus every knob of RUN_CONFIG_SCHEMA, grouped as KNOB_GROUPS says.

    A new run starts from the preset with the knobs recommended for the bundled model
    (trainers.config.recommended_knobs); `knobs` (a full config, e.g. a run being cloned) replaces that.
    """

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        project: Project,
        initial: Mapping[str, Any] | None = None,
        knobs: Mapping[str, Any] | None = None,
    ):
        initial = {"preset": "grpo", "queue": Queue.CPU, **(initial or {})}
        self.form = RunForm(data, project=project, initial=initial)
        preset = initial["preset"] if data is None else data.get("preset", "grpo")
        preset = preset if preset in PRESETS else "grpo"
        if knobs is not None:
            start = dict(knobs)
        else:
            start = resolve_run_config(preset, recommended_knobs(DEFAULT_MODEL)["knobs"])
        model = data.get(self.MODEL_FIELD, "") if data is not None else start.get("model", DEFAULT_MODEL)
        # What the form's note says about the model as typed (run_create.js refreshes it).
        self.recommendation = recommendation_for(str(model))
        self.knobs = SchemaForm(  # the part knobs offer what the workers have (webapp.experiments.parts)
            run_form_schema(), data, values=start, prefix="knob", exclude=RUN_FORM_EXCLUDED_KNOBS
        )

    MODEL_FIELD = "knob-model"

    def is_valid(self) -> bool:
        results = [self.form.is_valid(), self.knobs.is_valid()]
        return all(results)

    def values(self) -> dict[str, Any]:
        data = self.form.cleaned_data
        return {
            "name": data["name"],
            "environment": data["environment"],
            "rubric": data["rubric"],
            "preset": data["preset"],
            "queue": data["queue"],
            "overrides": overrides_from(data["preset"], self.knobs.values()),
        }

    def add_service_errors(self, error: ValidationError) -> None:
        _route_errors(error.message_dict, {"config": self.knobs, "overrides": self.knobs}, self.form)

    def partial_values(self) -> dict[str, Any]:
        """After a failed is_valid(): the name, preset and overrides of the fields that did parse (a
        field that did not keeps its own error), so the rest can still be checked in the same pass."""
        data = getattr(self.form, "cleaned_data", {})
        preset = data.get("preset") or "grpo"
        return {
            "name": data.get("name", ""),
            "preset": preset,
            "overrides": overrides_from(preset, self.knobs.values()),
            "queue": data.get("queue"),  # the parts it names must be on this queue's workers
        }

    def add_remaining_errors(self, errors: Mapping[str, list[str]]) -> None:
        """Show errors found on the partial values, except on fields that already show one."""
        showing = {*self.form.errors, *(self.knobs.add_prefix(f) for f in self.knobs.errors)}
        fresh: dict[str, list[str]] = {}
        for path, messages in errors.items():
            head, _, rest = path.partition(".")
            field = self.knobs.field_for_path(rest) if head == "config" else path
            if field is None or (self.knobs.add_prefix(field) if head == "config" else field) not in showing:
                fresh[path] = list(messages)
        _route_errors(fresh, {"config": self.knobs}, self.form)

    def knob_groups(self) -> list[tuple[str, list[forms.BoundField], bool]]:
        """(title, fields, whether one of them has an error) per group of knobs."""
        return [
            (title, fields, any(f.errors for f in fields)) for title, fields in self.knobs.groups(KNOB_GROUPS)
        ]

    def preset_fields(self) -> dict[str, dict[str, Any]]:
        """For run_create.js: each preset's knob values keyed by the input names they fill."""
        return {name: self.knobs.flat_values(values) for name, values in preset_knob_values().items()}

    def preset_keys(self) -> list[str]:
        """Input names of the knobs some preset sets: choosing a preset rewrites exactly these."""
        keys = sorted({key for spec in PRESETS.values() for key in spec})
        return [self.knobs.add_prefix(key) for key in keys if key in self.knobs.fields]


def like_run(run: Any) -> dict[str, Any]:
    """RunLauncher's arguments for "New run like this": the run's name, environment, rubric, preset,
    queue and every knob it ran with (the environment and rubric at their latest versions; each stays
    changeable on the form)."""
    initial: dict[str, Any] = {"name": f"{run.name} · again", "preset": run.preset, "queue": run.queue}
    if run.environment_version is not None:
        initial["environment"] = run.environment_version.environment_id
    if run.rubric_version is not None:
        initial["rubric"] = run.rubric_version.rubric_id
    if run.preset not in PRESETS:
        initial["preset"] = "grpo"
    knobs = {k: v for k, v in (run.resolved_config or {}).items() if k not in RUN_FORM_EXCLUDED_KNOBS}
    return {"initial": initial, "knobs": resolve_run_config(initial["preset"], knobs)}


def recommendation_for(model: str) -> dict[str, Any]:
    """recommended_knobs(model) with its knobs keyed by the run form's input names ("fields") and in
    words ("summary": "learning rate 2e-05, max new tokens 48"), for the form's note and its script."""
    recommendation = recommended_knobs(model)
    form = SchemaForm(RUN_CONFIG_SCHEMA, prefix="knob", exclude=RUN_FORM_EXCLUDED_KNOBS)
    titles = {spec.path: spec.prop.get("title", spec.name) for spec in form.schema_fields}
    summary = ", ".join(
        f"{titles.get((key,), key).lower()} {value}" for key, value in recommendation["knobs"].items()
    )
    return {**recommendation, "fields": form.flat_values(recommendation["knobs"]), "summary": summary}


class ForkForm:
    """Fork a stopped run: a name, the checkpoint to start from, and every knob, prefilled with the
    parent's. The preset, environment and rubric versions stay the parent's."""

    def __init__(self, data: Mapping[str, Any] | None = None, *, run: Any, checkpoints: list[Any]):
        self.run = run
        self.form = forms.Form(data)
        self.form.fields["name"] = forms.CharField(max_length=120, initial=f"{run.name} · fork")
        self.form.fields["checkpoint"] = forms.TypedChoiceField(
            choices=[(c.pk, f"step {c.step}") for c in reversed(checkpoints)],
            coerce=int,
            help_text="The weights, optimizer state and data position the fork starts from.",
        )
        start = resolve_run_config(run.preset, run.overrides or {})
        self.knobs = SchemaForm(
            run_form_schema(), data, values=start, prefix="knob", exclude=RUN_FORM_EXCLUDED_KNOBS
        )

    def is_valid(self) -> bool:
        return all([self.form.is_valid(), self.knobs.is_valid()])

    def values(self) -> dict[str, Any]:
        return {
            "name": self.form.cleaned_data["name"],
            "checkpoint_id": self.form.cleaned_data["checkpoint"],
            "overrides": overrides_from(self.run.preset, self.knobs.values()),
        }

    def add_service_errors(self, error: ValidationError) -> None:
        _route_errors(error.message_dict, {"config": self.knobs, "overrides": self.knobs}, self.form)

    def knob_groups(self) -> list[tuple[str, list[forms.BoundField], bool]]:
        return [
            (title, fields, any(f.errors for f in fields)) for title, fields in self.knobs.groups(KNOB_GROUPS)
        ]
