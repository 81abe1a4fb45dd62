"""`manage.py seed_demo`: the demo project a new user opens, and the run `make demo` launches."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from webapp.experiments.models import Run

pytestmark = pytest.mark.django_db


def test_the_demo_run_trains_lora_with_recomputed_activations_to_fit_a_laptop():
    """The demo shares a laptop with everything else its user runs (issue 25: ≤ 3 GB): its run trains LoRA
    adapters on every linear layer at LoRA's learning rate and recomputes activations in the backward pass
    (docs/trainers.md, "The demo trains LoRA")."""
    call_command("seed_demo", stdout=io.StringIO())
    run = Run.objects.get(project__slug="demo")
    config = run.resolved_config
    assert config["lora"]["enabled"] and config["lora"]["target_modules"] == ["all-linear"]
    assert config["activation_checkpointing"] is True
    assert config["learning_rate"] == 2e-4
    assert config["generation_dtype"] == "bfloat16"


def test_seeding_twice_keeps_one_demo_run():
    call_command("seed_demo", stdout=io.StringIO())
    call_command("seed_demo", stdout=io.StringIO())
    assert Run.objects.filter(project__slug="demo").count() == 1
