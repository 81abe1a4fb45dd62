"""An SDK from before the protobuf change — tinker 0.24 in its own venv (`make venv-tinker024`), JSON
bodies — against our stack: daphne + a real Celery worker with the bundled model. Its supervised loop
learns, forward() answers through /api/v1/forward, sampling returns tokens and log-probs, save_state a
tinker:// path, and the run is on the dashboard like a 0.38 client's."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.processes import ROOT, asgi_server, celery_worker
from webapp.accounts.services import api_token_create
from webapp.experiments.models import Run
from webapp.rollouts.models import MetricPoint, Trajectory
from webapp.tinker.services import sdk_key

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SDK024_PYTHON = ROOT / ".venv-tinker024" / "bin" / "python"


def test_a_pre_protobuf_sdk_trains_and_samples_over_json(project, users):
    if not SDK024_PYTHON.exists():
        pytest.skip("the tinker 0.24 venv is missing: run `make venv-tinker024` (make test does)")
    _, raw = api_token_create(user=users["bob"], name="sdk-0.24")
    with asgi_server(TINKER_SESSION_TIMEOUT_S="30") as url, celery_worker("cpu", DASHBOARD_URL=url):
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
            "TINKER_API_KEY": sdk_key(raw),
            "TINKER_TELEMETRY": "0",
        }
        done = subprocess.run(
            [str(SDK024_PYTHON), str(ROOT / "tests/fixtures/tinker_json/loop.py"), url],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-6000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
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
