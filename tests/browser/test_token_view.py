"""The token view in real Chromium, for a run ingested from outside through the SDK: a model turn's tokens
coloured by the statistic picked, the legend, a token past the gap threshold flagged, the hover card with
the token, its id and values, masked tool output hatched, hostile token text kept as text."""

from __future__ import annotations

import pytest

from tests.browser.conftest import sign_in
from tests.conftest import PASSWORD
from trainers.sdk.client import Studio
from webapp.rollouts.models import Trajectory

HOSTILE = '<img src=x onerror="window.pwned=1">'
PIECES = ["The", " answer", " is", " ", HOSTILE, " 4"]


@pytest.fixture
def sdk_trajectory(server, project, users):
    from webapp.accounts.services import api_token_create

    _token, raw = api_token_create(user=users["bob"], name="token view")
    studio = Studio(server, raw)
    reply = "".join(PIECES)
    item = {
        "task_id": "add-2-2",
        "prompt": "What is 2 + 2?",
        "reward": 1.0,
        "advantage": 0.5,
        "turns": [
            {
                "role": "user",
                "text": "What is 2 + 2? Use the tool.",
                "token_ids": [1, 2, 3],
                "loss_mask": [0, 0, 0],
            },
            {
                "role": "assistant",
                "text": reply,
                "token_ids": [101, 102, 103, 104, 105, 106],
                # The space (token 104) is masked from the loss: its advantage × mask is 0.
                "loss_mask": [1, 1, 1, 0, 1, 1],
                "token_stats": {
                    "logprob": [-0.01, -2.5, -0.2, -0.05, -7.0, -0.3],
                    "entropy": [0.1, 2.2, 0.4, 0.2, 3.9, 0.5],
                    "advantage": [0.5, 0.5, 0.5, 0.0, 0.5, 0.5],
                    "gap": [0.0, 0.02, -0.01, 0.0, 0.9, -0.03],
                    "text_lengths": [len(p) for p in PIECES],
                },
            },
            {
                "role": "tool",
                "text": "Result: 4",
                "tool_name": "calculator",
                "tool_result": "Result: 4",
                "token_ids": [7, 8, 9],
                "loss_mask": [0, 0, 0],
            },
        ],
    }
    with studio.start_run(
        project=project.slug, name="external with token stats", flush_interval_s=0.02
    ) as run:
        assert run.log_trajectories(1, [item]) == 1
    return project, Trajectory.objects.get(run__name="external with token stats")


def test_tokens_coloured_flagged_and_explained_on_hover(sdk_trajectory, server, page):
    project, trajectory = sdk_trajectory
    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/trajectories/{trajectory.pk}/")

    page.select_option("[data-token-quantity]", "gap")
    tokens = page.locator("#turn-1 .token-text .token")
    assert tokens.count() == 6
    assert tokens.all_inner_texts() == PIECES  # the reply, token by token, as text
    assert page.locator("#turn-1 .turn-text").is_hidden()
    assert page.locator("[data-token-legend]").is_visible()
    assert "log-prob gap" in page.inner_text("[data-token-legend]")
    # Only the token with |gap| 0.9 ≥ 0.5 is flagged.
    assert page.locator("#turn-1 .token.flagged").all_inner_texts() == [HOSTILE]
    assert "1 token past |gap| ≥ 0.5" in page.inner_text("[data-token-flagged]")
    colours = page.eval_on_selector_all("#turn-1 .token", "s => s.map(x => x.style.background)")
    assert all(colours[:3] + colours[4:]) and len(set(colours)) > 1  # token 3 is masked: hatched

    tokens.nth(1).hover()
    tip = page.locator("[data-token-tip]")
    assert tip.is_visible()
    card = tip.inner_text()
    assert '" answer"' in card and "id 102" in card
    assert "sampling log-prob: -2.50" in card and "entropy: 2.20" in card and "log-prob gap: 0.0200" in card

    # A lower threshold flags more; the entropy colouring recolours.
    page.fill("[data-token-threshold]", "0.025")
    assert page.locator("#turn-1 .token.flagged").count() == 2
    page.select_option("[data-token-quantity]", "entropy")
    assert "entropy" in page.inner_text("[data-token-legend]")

    # Advantage × loss mask: the masked token inside the reply is hatched, not coloured, and says so.
    page.select_option("[data-token-quantity]", "advantage")
    assert "advantage × mask" in page.inner_text("[data-token-legend]")
    assert "masked (no loss)" in page.inner_text("[data-token-legend]")
    masked = page.locator("#turn-1 .token.masked")
    assert masked.count() == 1 and masked.get_attribute("data-index") == "3"
    colours = page.eval_on_selector_all("#turn-1 .token", "s => s.map(x => x.style.background)")
    assert colours[3] == "" and all(colours[i] for i in (0, 1, 2, 4, 5))
    tokens.nth(3).hover()
    assert "id 104 · masked" in tip.inner_text()

    # The tool's output is masked from the loss, and the page says so.
    tool = page.locator("#turn-2")
    assert "masked" in (tool.get_attribute("class") or "")
    assert "masked: no loss" in page.evaluate(
        "getComputedStyle(document.querySelector('#turn-2 .turn-head'), '::after').content"
    )

    # Model output never became markup; back to plain text.
    assert page.evaluate("window.pwned") is None
    assert page.locator("ol[data-turns] img").count() == 0
    page.select_option("[data-token-quantity]", "")
    assert page.locator(".token-text").count() == 0
    assert HOSTILE in page.inner_text("#turn-1 .turn-text")
