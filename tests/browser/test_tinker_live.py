"""In real Chromium: a researcher's own loop through the real `tinker` SDK (sample → forward_backward with
importance_sampling → optim_step, as the cookbook's rl_loop does it) against the shared daphne server and a
real Celery worker holding the bundled SmolLM2 — the run page, opened once, gains a loss point per step
and each step's samples in its feed, without a reload."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.browser.conftest import sign_in, wait_until_following
from tests.processes import celery_worker
from tests.workers.test_tinker_sdk import tinker_service

pytestmark = pytest.mark.slow  # the browser marker comes with tests/browser/
tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

PASSWORD = "a-long-browser-password"
STEPS = 2


# Rows are made before `page` (see tests/browser/test_live_run_page.py): the token's raw value is all the
# loop needs afterwards.
@pytest.fixture
def researcher_key(transactional_db):
    from webapp.accounts.services import api_token_create
    from webapp.projects.services import project_create
    from webapp.tinker.services import sdk_key

    user = get_user_model().objects.create_user("tess", "tess@example.com", PASSWORD)
    project = project_create(name="Own loops", owner=user)
    return project.slug, sdk_key(api_token_create(user=user, name="loop")[1])


def loss_points(page) -> int:
    return page.evaluate("((document.getElementById('chart-loss') || {}).data || [{x: []}])[0].x.length")


def rl_step(client, prompt: list[int]) -> None:
    sampler = client.save_weights_and_get_sampling_client().result()
    sampled = sampler.sample(
        types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=6, temperature=1.0)
    ).result()
    ob = len(prompt) - 1
    datums = [
        types.Datum(
            model_input=types.ModelInput.from_ints(prompt + list(seq.tokens)[:-1]),
            loss_fn_inputs={
                "target_tokens": [0] * ob + list(seq.tokens),
                "logprobs": [0.0] * ob + list(seq.logprobs),
                "advantages": [0.0] * ob + [advantage] * len(seq.tokens),
            },
        )
        for seq, advantage in zip(sampled.sequences, (0.5, -0.5), strict=True)
    ]
    client.forward_backward(datums, "importance_sampling").result()
    client.optim_step(types.AdamParams(learning_rate=1e-3)).result()


def test_a_loops_loss_and_samples_arrive_live_on_its_run_page(researcher_key, server, page, monkeypatch):
    slug, key = researcher_key
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    with (
        celery_worker("cpu", name="browser-tinker", DASHBOARD_URL=server),
        tinker_service(base_url=server, api_key=key) as service,
    ):
        client = service.create_lora_training_client(base_model="smollm2-135m", rank=8).result()
        run_id = int(client.model_id.removeprefix("rs-run-"))
        prompt = client.get_tokenizer().encode("Question: what colour is the sky?\nAnswer:")

        sign_in(page, server, "tess", PASSWORD)
        page.goto(f"{server}/p/{slug}/runs/{run_id}/")
        wait_until_following(page)
        assert loss_points(page) == 0
        for step in range(1, STEPS + 1):
            rl_step(client, prompt)
            page.wait_for_function(
                f"((document.getElementById('chart-loss') || {{}}).data || [{{x: []}}])[0].x.length >= {step}",
                timeout=120_000,
            )
            page.wait_for_function(
                f"document.querySelector('[data-live-feed]').textContent.indexOf('step {step} · train group') !== -1",
                timeout=60_000,
            )
        assert loss_points(page) == STEPS
        assert page.locator("[data-live-status]").inner_text() == "Running"
