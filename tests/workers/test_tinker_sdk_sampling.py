"""Sampling clients without a training client, with the real `tinker` SDK (0.38) against daphne and a real
Celery worker: `create_sampling_client(base_model=…)` and `create_sampling_client(model_path=…)` of a run
that has ended.

Bob trains a client a few steps and saves its sampler weights. In the same session a base-model sampling
client is served by the training client's worker with its adapters off: it scores the text as the
untrained model did. Bob closes the session (the run ends). Next session, the saved path is a sampling
client of its own — a sampling run that loads the checkpoint — which scores the text as the trained client
did and samples tokens with log-probs; a path never saved is a clear error. A third session samples the
base model with no other client: a sampling run of the base model.
"""

from __future__ import annotations

import pytest

from tests.processes import asgi_server, celery_worker
from tests.workers.test_run_lifecycle import status_of, wait_for
from tests.workers.test_tinker_sdk import sdk_env, sl_datum, tinker_service  # noqa: F401 — fixtures
from webapp.accounts.services import api_token_create
from webapp.experiments.models import Run
from webapp.rollouts.models import Trajectory
from webapp.tinker.services import sdk_key

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

PARAMS = types.SamplingParams(max_tokens=6, seed=1)


def target_logprobs(client, datum) -> list[float]:
    return list(client.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist())


def scored(sampler, tokens: list[int]) -> list[float]:
    """log p of each token after the first, as the sampler's weights give it."""
    return list(sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()[1:])


def assert_sampled(sampler, prompt: list[int]) -> None:
    sampled = sampler.sample(types.ModelInput.from_ints(prompt), num_samples=2, sampling_params=PARAMS)
    sequences = sampled.result().sequences
    assert len(sequences) == 2
    for seq in sequences:
        assert 0 < len(seq.tokens) <= 6 and len(seq.logprobs) == len(seq.tokens)
        assert all(lp <= 0 for lp in seq.logprobs)


def sampling_run() -> Run:
    return Run.objects.filter(kind="tinker", resolved_config__has_key="sampler").latest("pk")


def test_sampling_clients_of_a_base_model_and_of_an_ended_runs_weights(project, users, sdk_env):  # noqa: F811
    _, raw = api_token_create(user=users["bob"], name="sdk")
    key = sdk_key(raw)
    text = "The capital of France is Paris."
    with (
        asgi_server(TINKER_SESSION_TIMEOUT_S="30") as url,
        celery_worker("cpu", DASHBOARD_URL=url),
    ):
        with tinker_service(base_url=url, api_key=key) as service:
            client = service.create_lora_training_client(base_model="smollm2-135m", rank=8, seed=0).result()
            tokenizer = client.get_tokenizer()
            tokens = tokenizer.encode(text)
            prompt = tokenizer.encode("The capital of France is")
            datum = sl_datum(tokenizer, text)
            untrained = target_logprobs(client, datum)
            for _ in range(3):
                client.forward_backward([datum], "cross_entropy")
                client.optim_step(types.AdamParams(learning_rate=1e-3, grad_clip_norm=1.0)).result()
            trained = target_logprobs(client, datum)
            assert sum(trained) > sum(untrained) + 0.5  # the client learnt the text
            saved = client.save_weights_for_sampler("trained").result().path

            base = service.create_sampling_client(base_model="smollm2-135m").result()
            assert scored(base, tokens) == pytest.approx(untrained, abs=1e-3)
            assert_sampled(base, prompt)
            assert Run.objects.filter(kind="tinker").count() == 1  # served by the training client's worker

            never = service.create_sampling_client(model_path=saved.replace("trained", "never")).result()
            with pytest.raises(tinker.RequestFailedError, match="No weights saved at"):
                never.sample(types.ModelInput.from_ints(prompt), 1, PARAMS).result()
        first = Run.objects.get(kind="tinker")
        wait_for(lambda: status_of(first) == "SUCCEEDED", 60, "the training client's end")

        # Next session: the ended run's saved weights, sampled by a run that loads them.
        with tinker_service(base_url=url, api_key=key) as service:
            with pytest.raises(tinker.NotFoundError, match="No checkpoint"):
                service.create_sampling_client(model_path=saved.replace("trained", "never")).result()
            with pytest.raises(tinker.NotFoundError, match="No training client 'rs-run-999999'"):
                service.create_sampling_client(model_path="tinker://rs-run-999999/weights/x").result()
            sampler = service.create_sampling_client(model_path=saved).result()
            assert sampler.get_base_model() == "smollm2-135m"
            assert scored(sampler, tokens) == pytest.approx(trained, abs=1e-3)
            assert_sampled(sampler, prompt)
        from_checkpoint = sampling_run()
        assert from_checkpoint.parent_checkpoint is not None and from_checkpoint.parent == first
        assert from_checkpoint.lineage == "init"
        wait_for(lambda: status_of(from_checkpoint) == "SUCCEEDED", 60, "the sampling run's end")
        wait_for(lambda: Trajectory.objects.filter(run=from_checkpoint).count() == 2, 30, "its samples")

        # A base model with no other client in the session: a sampling run of the base model.
        with tinker_service(base_url=url, api_key=key) as service:
            base = service.create_sampling_client(base_model="smollm2-135m").result()
            assert scored(base, tokens) == pytest.approx(untrained, abs=1e-3)
            assert_sampled(base, prompt)
        of_base = sampling_run()
        assert of_base.pk != from_checkpoint.pk and of_base.parent_checkpoint is None
        assert of_base.resolved_config["sampler"] == {"base": True}
