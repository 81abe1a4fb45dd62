"""Seed the demo project: a user, an environment, a rubric and a run definition. Idempotent."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from webapp.experiments.models import Environment, Rubric, Run
from webapp.experiments.services.environments import environment_create
from webapp.experiments.services.rubrics import rubric_create
from webapp.experiments.services.runs import run_create
from webapp.projects.models import Project
from webapp.projects.services import project_create

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "rollout-demo"
DEMO_PROJECT_SLUG = "demo"

DEMO_ENVIRONMENT = {
    "name": "Arithmetic with a calculator",
    "kind": "arithmetic_calculator",
    # The tasks bench/learning.py measured on (its default adds products and three operands).
    "config": {
        "min_digits": 1,
        "max_digits": 2,
        "operations": ["+", "-"],
        "max_operands": 2,
        "max_turns": 3,
        "curriculum": False,
    },
    "description": "Two-digit sums and differences; the model may call a calculator tool before answering.",
}
DEMO_RUBRIC = {
    "name": "Correct and well-formed",
    "description": "Mostly correctness, some credit for one calculator call and a well-formed answer, a "
    "penalty for rambling.",
    "spec": {
        "aggregation": "weighted_sum",
        "criteria": [
            {"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {"extract": "answer_tag"}},
            {
                "name": "answer format",
                "kind": "regex",
                "weight": 0.1,
                "params": {"pattern": "<answer>\\s*-?\\d+\\s*</answer>", "must_match": True},
            },
            # One calculator call; a malformed attempt still earns half, so a model that has never made
            # a valid call gets a signal it can reach (as in trainers/examples/arithmetic_grpo.yaml).
            {
                "name": "tool use",
                "kind": "tool_calls",
                "weight": 0.2,
                "params": {
                    "min_calls": 1,
                    "max_calls": 1,
                    "penalty_per_failed_call": 0.5,
                    "penalty_per_extra_call": 0.5,
                },
            },
            {
                "name": "overlong",
                "kind": "overlong_penalty",
                "weight": 0.2,
                "params": {"max_len": 160, "buffer": 32},
            },
        ],
    },
}
# An environment from the ecosystem beside ours: reasoning-gym's procedural tasks, graded by its own
# score_answer (the `env_reward` criterion). The settings bench/learning.py measured: one-digit sums.
DEMO_ECOSYSTEM_ENVIRONMENT = {
    "name": "reasoning-gym: basic arithmetic",
    "kind": "reasoning_gym",
    "config": {
        "dataset": "basic_arithmetic",
        "dataset_config": {
            "min_terms": 2,
            "max_terms": 2,
            "min_digits": 1,
            "max_digits": 1,
            "operators": ["+"],
            "allow_parentheses": False,
            "allow_negation": False,
        },
        "system_prompt": "Answer with the number only, inside <answer></answer>.",
        "few_shot": True,
        "eval_fraction": 0.3,
    },
    "description": "One-digit sums from reasoning-gym, scored by its own score_answer.",
}
DEMO_ECOSYSTEM_RUBRIC = {
    "name": "reasoning-gym score and a clean answer",
    "description": "The generator's own score, and a nudge towards a clean answer tag.",
    "spec": {
        "aggregation": "weighted_sum",
        "criteria": [
            {"name": "correct", "kind": "env_reward", "weight": 1.0, "params": {}},
            {
                "name": "format",
                "kind": "format",
                "weight": 0.1,
                "params": {"checks": ["answer_tag", "nothing_after_answer"]},
            },
        ],
    },
}
# The knobs bench/learning.py measured learning with (held-out accuracy 50% → 100% in ~10 steps on
# a 2-core CPU); the GRPO preset's learning rate (1e-6, sized for bigger models) barely moves 135M.
# Sized to show learning in minutes (issue 22): a step of these knobs is ~14–40 s on a 2-core CPU
# (docs/trainers.md, "The demo's step"), so the first trained step shows ~1–2 minutes after launch
# (model load, then a 4-task evaluation at step 0 — 16 tasks took ~11 minutes on a busy machine — then
# step 1) and the reward rises within ~10 steps (< 10 minutes). Evaluation stays small and periodic.
# Sized to share a laptop (issue 25: ≤ 3 GB): LoRA on every linear layer at 10× the full fine-tuning
# rate learns as full fine-tuning does here (reward 1.3 by step 8) without gradients or AdamW moments
# for the base weights (−1.5 GiB), and recomputing each layer's activations in the backward pass keeps
# the update's peak under generation's; the run peaked at 2.76 GiB against 4.9 with full fine-tuning,
# for about the same step time (bench/memory.py, bench/demo_step.py; docs/trainers.md). `dtype: mixed`
# runs the learner's passes in bf16 where the CPU has bf16 matrix units (fp32 weights and moments): the
# update ~30 % faster there, fp32 elsewhere.
DEMO_RUN = {
    "name": "GRPO on arithmetic (demo)",
    "preset": "grpo",
    "overrides": {
        "max_steps": 20,
        "group_size": 8,
        "prompts_per_step": 2,
        "max_new_tokens": 48,
        "max_turns": 3,
        "learning_rate": 2e-4,
        "lora": {"enabled": True, "r": 16, "alpha": 32, "dropout": 0.0, "target_modules": ["all-linear"]},
        "activation_checkpointing": True,
        "max_grad_norm": 1.0,
        "dtype": "mixed",
        "generation_dtype": "bfloat16",
        "checkpoint_every": 10,
        "eval_every": 5,
        "eval_tasks": 4,
    },
}


class Command(BaseCommand):
    help = "Create the demo user and project (idempotent). Prints the login."

    def add_arguments(self, parser):
        parser.add_argument("--launch", action="store_true", help="queue the demo run on the worker")

    @transaction.atomic
    def handle(self, *args, launch: bool = False, **options):
        User = get_user_model()
        user, created = User.objects.get_or_create(
            username=DEMO_USERNAME, defaults={"email": "demo@example.com"}
        )
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
        project = Project.objects.filter(slug=DEMO_PROJECT_SLUG).first() or project_create(
            name="Demo: arithmetic agents",
            slug=DEMO_PROJECT_SLUG,
            owner=user,
            description="A tool-using arithmetic agent trained with GRPO on the bundled SmolLM2-135M.",
        )
        environment = Environment.objects.filter(project=project, name=DEMO_ENVIRONMENT["name"]).first()
        if environment is None:
            environment = environment_create(project=project, user=user, **DEMO_ENVIRONMENT)
        rubric = Rubric.objects.filter(project=project, name=DEMO_RUBRIC["name"]).first()
        if rubric is None:
            rubric = rubric_create(project=project, user=user, **DEMO_RUBRIC)
        if not Environment.objects.filter(project=project, name=DEMO_ECOSYSTEM_ENVIRONMENT["name"]).exists():
            environment_create(project=project, user=user, **DEMO_ECOSYSTEM_ENVIRONMENT)
        if not Rubric.objects.filter(project=project, name=DEMO_ECOSYSTEM_RUBRIC["name"]).exists():
            rubric_create(project=project, user=user, **DEMO_ECOSYSTEM_RUBRIC)
        if launch or not Run.objects.filter(project=project).exists():
            run_create(
                project=project,
                environment=environment,
                rubric=rubric,
                user=user,
                dispatch=launch,
                **DEMO_RUN,
            )
        self.stdout.write(
            f"demo project ready: /p/{project.slug}/  (login: {DEMO_USERNAME} / {DEMO_PASSWORD})"
        )
