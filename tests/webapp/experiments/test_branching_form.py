"""The run form shows the branching rollouts' knobs in their own group, with what each does, and a branching
config the form reads back is one the trainer accepts."""

from __future__ import annotations

from django.utils.datastructures import MultiValueDict

from tests.webapp.html_forms import form_data
from trainers.config import KNOB_GROUPS, RUN_CONFIG_SCHEMA, resolve_run_config, validate_run_config
from trainers.rollout.branching import BRANCHING_KNOBS
from webapp.experiments.forms import RUN_FORM_EXCLUDED_KNOBS
from webapp.experiments.schema_forms import SchemaForm


def test_the_branching_knobs_are_a_group_of_the_run_form_with_their_help():
    form = SchemaForm(RUN_CONFIG_SCHEMA, exclude=RUN_FORM_EXCLUDED_KNOBS)
    group = dict(form.groups(KNOB_GROUPS))["Branching rollouts (ARPO, AEPO)"]
    assert [bound.name for bound in group] == list(BRANCHING_KNOBS)
    assert "the turn after each tool result" in group[1].help_text  # the entropy window (k)
    # The strategy itself is chosen with the sampling knobs (a registered part: trainers.parts).
    assert "branching" in form["rollout_strategy"].help_text
    html = form.as_div()
    assert "ARPO" in html and "Entropy window (k)" in html and "Branch factor (Z)" in html


def test_a_branching_config_round_trips_through_the_form():
    chosen = {"rollout_strategy": "branching", "branch_attribution": "hard", "branch_factor": 3}
    config = resolve_run_config("grpo", chosen)
    form = SchemaForm(RUN_CONFIG_SCHEMA, values=config, prefix="knob", exclude=RUN_FORM_EXCLUDED_KNOBS)
    posted = MultiValueDict(form_data(f"<form>{form.as_div()}</form>"))
    bound = SchemaForm(RUN_CONFIG_SCHEMA, posted, prefix="knob", exclude=RUN_FORM_EXCLUDED_KNOBS)
    assert bound.is_valid(), bound.errors
    read = {**config, **bound.values()}
    assert {k: read[k] for k in chosen} == chosen
    assert validate_run_config(resolve_run_config("grpo", {**read, "group_size": 1})) == {
        "group_size": ["Branching rollouts need a group of at least 2 samples to branch into."]
    }
