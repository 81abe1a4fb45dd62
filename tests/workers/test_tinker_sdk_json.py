"""An SDK from before the protobuf change — tinker 0.24 in its own venv (`make venv-tinker024`), JSON
bodies — against our stack: daphne + a real Celery worker with the bundled model. Its supervised loop
learns, forward() answers through /api/v1/forward, sampling returns tokens and log-probs, save_state a
tinker:// path, and the run is on the dashboard like a 0.38 client's. A saved state starts clients of
later sessions — with its Adam state and without — as 0.24 makes them (weights info + create_model +
load_state), with the checkpoint as their lineage, like test_tinker_sdk_state.py's 0.38 clients."""

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

SDK024_PYTHON = ROOT / ".venv-tinker024" / "bin" / "python"


def sdk_024(key: str, script: str, *args: str) -> dict:
    """Run a fixture script of tests/fixtures/tinker_json on the 0.24 SDK; the JSON line it printed."""
    if not SDK024_PYTHON.exists():
        pytest.skip("the tinker 0.24 venv is missing: run `make venv-tinker024` (make test does)")
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
        "TINKER_API_KEY": key,
        "TINKER_TELEMETRY": "0",
    }
    done = subprocess.run(
        [str(SDK024_PYTHON), str(ROOT / "tests/fixtures/tinker_json" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_pre_protobuf_sdk_trains_and_samples_over_json(project, users):
    _, raw = api_token_create(user=users["bob"], name="sdk-0.24")
    with asgi_server(TINKER_SESSION_TIMEOUT_S="30") as url, celery_worker("cpu", DASHBOARD_URL=url):
        seen = sdk_024(sdk_key(raw), "loop.py", url)
        assert seen["sdk"].startswith("0.24")
        assert seen["losses"][-1] < seen["losses"][0], seen["losses"]
        assert seen["forward_logprobs"] and all(n > 0 for n in seen["forward_logprobs"])
        assert len(seen["samples"]) == 2
        for sample in seen["samples"]:
            assert 0 < len(sample["tokens"]) <= 5 and len(sample["logprobs"]) == len(sample["tokens"])
        assert seen["state_path"].startswith("tinker://rs-run-")
        run = Run.objects.get(kind="tinker")
        assert MetricPoint.objects.filter(run=run, key="loss").count() == 3
        assert Trajectory.objects.filter(run=run).count() == 2


def test_a_pre_protobuf_sdk_starts_clients_from_a_saved_state(project, users):
    _, raw = api_token_create(user=users["bob"], name="sdk-0.24")
    with asgi_server(TINKER_SESSION_TIMEOUT_S="20") as url, celery_worker("cpu", DASHBOARD_URL=url):
        day_one = sdk_024(sdk_key(raw), "resume.py", "save", url)
        assert day_one["sdk"].startswith("0.24") and day_one["path"].startswith("tinker://rs-run-")
        first = Run.objects.get(kind="tinker")
        wait_for(lambda: Checkpoint.objects.filter(run=first).exists(), 60, "the state's checkpoint")
        state_row = Checkpoint.objects.get(run=first)
        assert state_row.path.endswith("tinker/weights/json-day-one")

        # Each client a session of its own; the next starts once the last one's run ended (one worker).
        resumed = sdk_024(sdk_key(raw), "resume.py", "with_optimizer", url, day_one["path"])
        fresh = sdk_024(sdk_key(raw), "resume.py", "weights_only", url, day_one["path"])
        assert resumed["base_model"] == fresh["base_model"] == "smollm2-135m"
        # Both start from the saved weights; only the one with the Adam state takes the saved client's step.
        assert resumed["loaded_loss"] == pytest.approx(day_one["saved_loss"], rel=1e-5)
        assert fresh["loaded_loss"] == pytest.approx(day_one["saved_loss"], rel=1e-5)
        assert resumed["stepped_loss"] == pytest.approx(day_one["next_loss"], rel=1e-4)
        assert fresh["stepped_loss"] != pytest.approx(day_one["next_loss"], rel=1e-4)
        later = Run.objects.exclude(pk=first.pk).filter(kind="tinker").order_by("pk")
        assert [(r.parent, r.parent_checkpoint, r.lineage) for r in later] == [
            (first, state_row, "resume"),
            (first, state_row, "init"),
        ]
        assert all(r.resolved_config["lora"]["rank"] == 8 for r in later)
