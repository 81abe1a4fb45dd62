"""`forward_backward_custom` with the real `tinker` SDK (0.38) against daphne and a real Celery worker.

The SDK computes a custom loss on the client: it asks the service for the log-probs (a `forward` with
`cross_entropy`), runs the user's torch function on them, and sends the gradient back as the weights of a
`cross_entropy` forward-backward (weights = -dLoss/dlogprobs). Bob's custom loss is the plain NLL, so the
service must give the same loss and the same gradient as the built-in `cross_entropy`, and training on it
must lower the loss.
"""

from __future__ import annotations

import pytest

from tests.processes import asgi_server, celery_worker
from tests.workers.test_tinker_sdk import sdk_env, sl_datum, tinker_service  # noqa: F401 — fixtures
from webapp.accounts.services import api_token_create
from webapp.tinker.services import sdk_key

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

FROZEN = types.AdamParams(learning_rate=0.0)  # reports the gradient's norm, moves no weight


def nll(data, logprobs_list):
    """The custom loss: -Σ weights · log p, as the user writes it with torch."""
    loss = sum(
        -(logprobs * datum.loss_fn_inputs["weights"].to_torch()).sum()
        for datum, logprobs in zip(data, logprobs_list, strict=True)
    )
    return loss, {"custom_nll": float(loss.detach())}


def test_a_custom_loss_trains_like_the_built_in_one(project, users, sdk_env):  # noqa: F811
    _, raw = api_token_create(user=users["bob"], name="sdk")
    with (
        asgi_server(TINKER_SESSION_TIMEOUT_S="30") as url,
        celery_worker("cpu", DASHBOARD_URL=url),
        tinker_service(base_url=url, api_key=sdk_key(raw)) as service,
    ):
        client = service.create_lora_training_client(base_model="smollm2-135m", rank=8, seed=0).result()
        tokenizer = client.get_tokenizer()
        batch = [
            sl_datum(tokenizer, "The capital of France is Paris."),
            sl_datum(tokenizer, "Two plus two is four."),
        ]
        # The same weights, the custom loss then the built-in one: the same loss and gradient.
        custom = client.forward_backward_custom(batch, nll)
        custom_step = client.optim_step(FROZEN)
        builtin = client.forward_backward(batch, "cross_entropy")
        builtin_step = client.optim_step(FROZEN)
        custom_out, builtin_out = custom.result(), builtin.result()
        assert custom_out.metrics["custom_nll"] == pytest.approx(custom_out.metrics["loss:sum"])
        assert custom_out.metrics["loss:sum"] == pytest.approx(builtin_out.metrics["loss:sum"], rel=1e-4)
        # The surrogate the service computed (-Σ (-dL/dlogp) · logp) is the NLL itself for this loss.
        assert custom_out.metrics["surrogate_loss:sum"] == pytest.approx(
            builtin_out.metrics["loss:sum"], rel=1e-4
        )
        custom_grad = custom_step.result().metrics["grad_norm"]
        builtin_grad = builtin_step.result().metrics["grad_norm"]
        assert custom_grad > 0 and custom_grad == pytest.approx(builtin_grad, rel=1e-3)

        # DRO (a built-in loss) on the sampler's own log-probs has no penalty: with advantages = weights
        # it is the same NLL.
        dro_batch = [
            types.Datum(
                model_input=datum.model_input,
                loss_fn_inputs={
                    "target_tokens": datum.loss_fn_inputs["target_tokens"],
                    "logprobs": out["logprobs"],
                    "advantages": datum.loss_fn_inputs["weights"],
                },
            )
            for datum, out in zip(batch, builtin_out.loss_fn_outputs, strict=True)
        ]
        dro = client.forward_backward(dro_batch, "dro", loss_fn_config={"beta": 0.5})
        client.optim_step(FROZEN).result()
        assert dro.result().metrics["loss:sum"] == pytest.approx(builtin_out.metrics["loss:sum"], rel=1e-4)

        losses = []
        for _ in range(3):
            fb = client.forward_backward_custom(batch, nll)
            client.optim_step(types.AdamParams(learning_rate=1e-3, grad_clip_norm=1.0))
            losses.append(fb.result().metrics["loss:sum"])
        after = client.forward(batch, "cross_entropy").result().metrics["loss:sum"]
        assert losses[0] == pytest.approx(builtin_out.metrics["loss:sum"], rel=1e-4)
        assert after < losses[-1] < losses[0], (losses, after)
