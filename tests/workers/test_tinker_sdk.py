"""The real `tinker` SDK (0.38, protobuf bodies) against our stack: daphne + a real Celery worker.

A researcher's own loop — create_lora_training_client on the bundled SmolLM2, forward_backward +
optim_step on a tiny supervised batch (the loss falls), save_weights_and_get_sampling_client + sample
(tokens and log-probs come back) — runs as a run of kind `tinker` whose metrics, samples and checkpoints
are on the dashboard; a wrong key gets the SDK's auth error; a cancel in the dashboard makes the client's
next call fail saying so.
"""

from __future__ import annotations

import contextlib

import pytest

from tests.processes import asgi_server, celery_worker
from tests.workers.test_run_lifecycle import status_of, wait_for
from webapp.accounts.services import api_token_create
from webapp.experiments.models import Checkpoint, Run
from webapp.experiments.services import run_request_cancel
from webapp.rollouts.models import MetricPoint, Trajectory
from webapp.tinker.services import sdk_key

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402


@contextlib.contextmanager
def tinker_service(**kwargs):
    """A `tinker.ServiceClient` closed when the block ends: its session heartbeat runs in a thread of this
    process, and left open it outlives the test's server and logs connection errors into later tests (a
    trainer test's run log caught one in CI)."""
    service = tinker.ServiceClient(**kwargs)
    try:
        yield service
    finally:
        try:
            service.close("success").result(timeout=30)
        except Exception:  # noqa: BLE001 — a run the test cancelled answers its close with an error
            pass


def sl_datum(tokenizer, text: str) -> types.Datum:
    tokens = tokenizer.encode(text)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )


def rl_datum(prompt: list[int], tokens: list[int], logprobs: list[float], advantage: float) -> types.Datum:
    ob = len(prompt) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(prompt + tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": [0] * ob + tokens,
            "logprobs": [0.0] * ob + logprobs,
            "advantages": [0.0] * ob + [advantage] * len(tokens),
        },
    )


@pytest.fixture
def sdk_env(monkeypatch):
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)


def test_the_real_sdk_trains_samples_and_the_dashboard_sees_it(project, users, sdk_env):
    _, raw = api_token_create(user=users["bob"], name="sdk")
    with (
        asgi_server(TINKER_SESSION_TIMEOUT_S="30") as url,
        celery_worker("cpu", DASHBOARD_URL=url),
        contextlib.ExitStack() as clients,
    ):
        with pytest.raises(tinker.AuthenticationError):
            refused = clients.enter_context(tinker_service(base_url=url, api_key="tml-rsu_not-a-token"))
            refused.get_server_capabilities()

        service = clients.enter_context(tinker_service(base_url=url, api_key=sdk_key(raw)))
        names = [m.model_name for m in service.get_server_capabilities().supported_models]
        assert "smollm2-135m" in names
        client = service.create_lora_training_client(base_model="smollm2-135m", rank=8, seed=0).result()
        tokenizer = client.get_tokenizer()
        batch = [
            sl_datum(tokenizer, "The capital of France is Paris."),
            sl_datum(tokenizer, "Two plus two is four."),
        ]
        losses = []
        for _ in range(4):
            fb = client.forward_backward(batch, "cross_entropy")
            step = client.optim_step(types.AdamParams(learning_rate=1e-3, grad_clip_norm=1.0))
            out = fb.result()
            losses.append(out.metrics["loss:sum"])
            assert step.result().metrics["grad_norm"] > 0
            assert len(out.loss_fn_outputs) == 2 and out.loss_fn_outputs[0]["logprobs"].shape[0] > 0
        assert losses[-1] < losses[0], losses  # (Adam at 5e-3 on two datums overshot at step 4)

        sampler = client.save_weights_and_get_sampling_client()
        prompt = types.ModelInput.from_ints(tokenizer.encode("The capital of France is"))
        sampled = sampler.sample(
            prompt, num_samples=2, sampling_params=types.SamplingParams(max_tokens=6, seed=1)
        ).result()
        assert len(sampled.sequences) == 2
        for seq in sampled.sequences:
            assert 0 < len(seq.tokens) <= 6 and len(seq.logprobs) == len(seq.tokens)
            assert all(lp <= 0 for lp in seq.logprobs)
        # An RL step on what was sampled, datums built as the cookbook's rl_loop builds them: the
        # samples reach the dashboard with the advantages their datums carried.
        prompt_tokens = prompt.to_ints()
        rl_batch = [
            rl_datum(prompt_tokens, list(seq.tokens), list(seq.logprobs), advantage)
            for seq, advantage in zip(sampled.sequences, (0.5, -0.5), strict=True)
        ]
        client.forward_backward(rl_batch, "importance_sampling").result()
        client.optim_step(types.AdamParams(learning_rate=1e-3)).result()
        saved = client.save_state("after-sl").result()
        assert saved.path.startswith("tinker://rs-run-")

        run = Run.objects.get(kind="tinker")
        assert run.status == "RUNNING" and run.created_by == users["bob"]
        wait_for(lambda: Checkpoint.objects.filter(run=run).exists(), 60, "the checkpoint row")
        assert MetricPoint.objects.filter(run=run, key="loss").count() == 5
        assert MetricPoint.objects.filter(run=run, key="grad_norm").count() == 5
        trajectories = Trajectory.objects.filter(run=run).order_by("sample_index")
        assert trajectories.count() == 2 and trajectories.first().prompt.startswith("The capital of France")
        # Identical samples (one seed for both) share the advantage of the last datum made of them.
        advantage_of = {tuple(seq.tokens): a for seq, a in zip(sampled.sequences, (0.5, -0.5), strict=True)}
        expected = [advantage_of[tuple(seq.tokens)] for seq in sampled.sequences]
        assert [t.advantage for t in trajectories] == expected

        run_request_cancel(run=run, user=users["bob"])
        wait_for(lambda: status_of(run) == "CANCELLED", 60, "the cancelled run")
        with pytest.raises(tinker.RequestFailedError, match="cancelled in the dashboard"):
            client.forward_backward(batch, "cross_entropy").result()
