"""The unmodified tinker-cookbook starter recipes (0.5.8, from .venv-cookbook) against our stack.

`python -m tinker_cookbook.recipes.sl_loop` and `rl_loop`, as published, run to completion against daphne
and a real Celery worker with the bundled SmolLM2 — named by its hub id, as a cookbook user would — their
data (no_robots, gsm8k) and the tokenizer read offline from caches this test prepares
(tests/fixtures/cookbook/offline_cache.py). Each recipe is a run of kind `tinker` on the dashboard with
its loss curve, its samples and its checkpoints, and the recipe's own metrics.jsonl / checkpoints.jsonl
are written as against the hosted service. (The 135M model's completions rarely earn gsm8k's reward, so
rl_loop usually skips its training steps — all advantages zero; its importance_sampling step is what
test_tinker_sdk.py and tests/browser/test_tinker_live.py run.)
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.processes import ROOT, asgi_server, celery_worker
from tests.workers.test_run_lifecycle import wait_for
from webapp.accounts.services import api_token_create
from webapp.experiments.models import Checkpoint, Run
from webapp.rollouts.models import MetricPoint, Trajectory
from webapp.tinker.services import sdk_key

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

COOKBOOK_PYTHON = ROOT / ".venv-cookbook" / "bin" / "python"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
RECIPE_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def offline_caches(tmp_path_factory):
    if not COOKBOOK_PYTHON.exists():
        pytest.skip("the cookbook venv is missing: run `make venv-cookbook` (make test does)")
    from trainers.models import model_dir

    target = tmp_path_factory.mktemp("cookbook-offline")
    subprocess.run(
        [
            str(COOKBOOK_PYTHON),
            str(ROOT / "tests/fixtures/cookbook/offline_cache.py"),
            str(target),
            model_dir(),
        ],
        check=True,
        timeout=120,
    )
    return target


def run_recipe(recipe: str, url: str, key: str, caches, log_path, *options: str) -> str:
    """The recipe's own entry point with chz options; its output (for the assertion messages)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL"))},
        "TINKER_API_KEY": key,
        "TINKER_TELEMETRY": "0",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_CACHE": str(caches / "hub"),
        "HF_DATASETS_CACHE": str(caches / "datasets"),
        "TOKENIZERS_PARALLELISM": "false",
    }
    done = subprocess.run(
        [
            str(COOKBOOK_PYTHON),
            "-m",
            f"tinker_cookbook.recipes.{recipe}",
            f"base_url={url}",
            f"model_name={MODEL}",
            f"log_path={log_path}",
            "lora_rank=8",
            *options,
        ],
        env=env,
        cwd=log_path.parent,
        capture_output=True,
        text=True,
        timeout=RECIPE_TIMEOUT_S,
    )
    output = done.stdout[-4000:] + done.stderr[-6000:]
    assert done.returncode == 0, output
    return output


def metrics_of(log_path) -> list[dict]:
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines() if line]


def test_unmodified_sl_loop_and_rl_loop_run_to_completion(project, users, offline_caches, tmp_path):
    _, raw = api_token_create(user=users["bob"], name="cookbook")
    with (
        asgi_server(TINKER_SESSION_TIMEOUT_S="25") as url,
        celery_worker("cpu", DASHBOARD_URL=url),
    ):
        sl_log = tmp_path / "sl"
        run_recipe(
            "sl_loop",
            url,
            sdk_key(raw),
            offline_caches,
            sl_log,
            "batch_size=2",
            "max_length=64",
            "save_every=0",
        )
        sl_rows = metrics_of(sl_log)
        assert [row["step"] for row in sl_rows] == [0, 1]
        assert all(row["train_mean_nll"] > 0 for row in sl_rows)
        assert "final" in (sl_log / "checkpoints.jsonl").read_text()
        sl_run = Run.objects.get(kind="tinker")
        assert sl_run.created_by == users["bob"]
        assert MetricPoint.objects.filter(run=sl_run, key="loss").count() == 2
        # One checkpoint per step: the final state and sampler weights share step 2.
        wait_for(lambda: Checkpoint.objects.filter(run=sl_run).exists(), 60, "the final checkpoint")
        # The recipe exits without closing its session: the run ends once its heartbeats (every 10 s) stop.
        wait_for(lambda: Run.objects.get(pk=sl_run.pk).status == "SUCCEEDED", 60, "the sl_loop run's end")

        rl_log = tmp_path / "rl"
        run_recipe(
            "rl_loop",
            url,
            sdk_key(raw),
            offline_caches,
            rl_log,
            "batch_size=2",
            "group_size=4",
            "max_tokens=24",
            "max_steps=2",
            "save_every=0",
        )
        rl_rows = metrics_of(rl_log)
        assert [row["step"] for row in rl_rows] == [0, 1]
        assert all("reward/total" in row for row in rl_rows)
        rl_run = Run.objects.filter(kind="tinker").exclude(pk=sl_run.pk).get()
        # Two batches of two prompts, four samples each: every one is a trajectory with its tokens.
        wait_for(lambda: Trajectory.objects.filter(run=rl_run).count() == 16, 60, "the rl_loop samples")
        assert "final" in (rl_log / "checkpoints.jsonl").read_text()


def test_sl_loop_restarted_on_its_log_path_resumes_from_its_last_state(
    project, users, offline_caches, tmp_path
):
    """The cookbook's resume: a recipe started again on a log_path whose checkpoints.jsonl names a state
    calls `create_training_client_from_state_with_optimizer` on it and trains on from that batch."""
    _, raw = api_token_create(user=users["bob"], name="cookbook")
    sl_log = tmp_path / "sl"
    options = ("batch_size=2", "max_length=64", "save_every=1")
    with (
        asgi_server(TINKER_SESSION_TIMEOUT_S="20") as url,
        celery_worker("cpu", DASHBOARD_URL=url),
    ):
        run_recipe("sl_loop", url, sdk_key(raw), offline_caches, sl_log, *options)
        records = (sl_log / "checkpoints.jsonl").read_text().splitlines()
        assert [json.loads(r)["name"] for r in records] == ["000001", "final"]
        # As if the recipe had been stopped after step 1's save: its last state is batch 1's.
        (sl_log / "checkpoints.jsonl").write_text(records[0] + "\n")
        state_path = json.loads(records[0])["state_path"]
        first = Run.objects.get(kind="tinker")

        run_recipe("sl_loop", url, sdk_key(raw), offline_caches, sl_log, *options)
        assert "Resuming from batch 1" in (sl_log / "logs.log").read_text()
        assert [row["step"] for row in metrics_of(sl_log)] == [0, 1, 1]  # appended: batch 1 again
        assert "final" in (sl_log / "checkpoints.jsonl").read_text()
        resumed = Run.objects.exclude(pk=first.pk).get(kind="tinker")
        assert resumed.lineage == "resume" and resumed.parent == first
        assert resumed.parent_checkpoint.path.endswith("tinker/weights/000001"), state_path
        assert MetricPoint.objects.filter(run=resumed, key="loss").count() == 1


def test_rl_loop_restarted_on_its_log_path_resumes_from_its_last_state(
    project, users, offline_caches, tmp_path
):
    """rl_loop's resume, as sl_loop's: started again on its log_path, it makes its client from the last
    state in checkpoints.jsonl (`create_training_client_from_state_with_optimizer`) and samples and trains
    on from that batch. The 135M model rarely earns a reward, so its steps usually train nothing: batch
    1's state and the final one are then saves at the same step, whose one dashboard checkpoint the final
    save took — batch 1's state must still load."""
    _, raw = api_token_create(user=users["bob"], name="cookbook")
    rl_log = tmp_path / "rl"
    options = ("batch_size=2", "group_size=4", "max_tokens=24", "max_steps=2", "save_every=1")
    with (
        asgi_server(TINKER_SESSION_TIMEOUT_S="20") as url,
        celery_worker("cpu", DASHBOARD_URL=url),
    ):
        run_recipe("rl_loop", url, sdk_key(raw), offline_caches, rl_log, *options)
        records = (rl_log / "checkpoints.jsonl").read_text().splitlines()
        assert [json.loads(r)["name"] for r in records] == ["000001", "final"]
        # As if the recipe had been stopped after batch 1's save: its last state is batch 1's.
        (rl_log / "checkpoints.jsonl").write_text(records[0] + "\n")
        first = Run.objects.get(kind="tinker")
        wait_for(lambda: Checkpoint.objects.filter(run=first).exists(), 60, "the first run's checkpoints")

        run_recipe("rl_loop", url, sdk_key(raw), offline_caches, rl_log, *options)
        assert "Resuming from batch 1" in (rl_log / "logs.log").read_text()
        assert [row["step"] for row in metrics_of(rl_log)] == [0, 1, 1]  # appended: batch 1 again
        assert "final" in (rl_log / "checkpoints.jsonl").read_text()
        resumed = Run.objects.exclude(pk=first.pk).get(kind="tinker")
        assert resumed.lineage == "resume" and resumed.parent == first
        assert resumed.parent_checkpoint.run == first
        # Batch 1 again: two prompts, four samples each, drawn by the resumed client.
        wait_for(lambda: Trajectory.objects.filter(run=resumed).count() == 8, 60, "the resumed samples")
