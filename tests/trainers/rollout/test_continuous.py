"""Continuous batching (trainers.rollout.backends.continuous): rows join the decode batch as their turns
come, and greedy decoding gives exactly what the turn-by-turn schedule gives."""

from __future__ import annotations

from typing import Any

import pytest

from trainers.rollout.backends.base import Request
from trainers.rollout.backends.transformers_backend import TransformersBackend
from trainers.rollout.chat import ChatFormat
from trainers.rollout.episodes import generate_rollouts
from trainers.sdk.cancel import Cancelled, cancellable

pytestmark = pytest.mark.slow

ENV_CONFIG = {"max_digits": 3}


def _arithmetic() -> Any:
    from trainers.registry import environment_kind

    return environment_kind("arithmetic_calculator")


def _roll_out(backend: TransformersBackend, tokenizer: Any, tasks: list, samples: int, **knobs: Any) -> tuple:
    kind = _arithmetic()
    calls: list[tuple[int, int, int]] = []
    options = {"max_turns": 3, "max_new_tokens": 40, "max_context_tokens": 2048, **knobs}
    groups = generate_rollouts(
        backend,
        ChatFormat(tokenizer),
        lambda: kind.build(ENV_CONFIG),
        tasks,
        [list(range(samples)) for _ in tasks],
        temperature=0.0,
        top_p=1.0,
        generation_seed=0,
        progress=lambda *call: calls.append(call),
        **options,
    )
    return [r for group in groups for r in group], calls


def _same(a: list, b: list) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.completion_ids == y.completion_ids
        assert x.loss_mask == y.loss_mask
        assert x.finish_reasons == y.finish_reasons
        assert x.trajectory.status == y.trajectory.status
        assert [(t.role, t.text, t.tool_name) for t in x.trajectory.turns] == [
            (t.role, t.text, t.tool_name) for t in y.trajectory.turns
        ]
        assert x.behaviour_logprobs == pytest.approx(y.behaviour_logprobs, abs=1e-3)


def test_greedy_rows_that_join_mid_decode_sample_what_turns_together_sample(smollm):
    """Arithmetic episodes with the calculator, of different lengths: each row's next turn joins the batch
    while the others decode (a batch wider and narrower than the joining row), and the tokens, finish
    reasons, turns and statuses are those of generating a turn of every episode at a time."""
    model, tokenizer = smollm
    tasks = _arithmetic().build(ENV_CONFIG).tasks("eval", 4, seed=0)
    turns = TransformersBackend(model=model, tokenizer=tokenizer, continuous=False)
    rows = TransformersBackend(model=model, tokenizer=tokenizer, continuous=True)
    expected, expected_calls = _roll_out(turns, tokenizer, tasks, 1)
    got, calls = _roll_out(rows, tokenizer, tasks, 1)
    _same(expected, got)
    # The episodes took several turns, of different lengths: rows did join a running batch.
    assert max(len(r.finish_reasons) for r in got) >= 2
    assert len({len(r.completion_ids) for r in got}) > 1
    assert rows.last_schedule["joined_longer"] > 0 and rows.last_schedule["joined_shorter"] > 0
    # The page's progress: one call per turn reached by every episode still going (a group may be done
    # sooner with rows scheduled), all done at the end.
    assert [c[0] for c in calls] == [c[0] for c in expected_calls] == list(range(1, len(calls) + 1))
    assert calls[-1] == expected_calls[-1] and calls[-1][1:] == (4, 4)
    # Each turn after the first encoded only what was added (the prefix store served the rest).
    reused, encoded = rows.last_session
    assert reused > 3 * encoded and rows.last_session == pytest.approx(turns.last_session, rel=0.05)


def test_a_narrow_wave_queues_rows_and_samples_the_same(smollm):
    """With a cache budget for two rows at a time, the other requests wait and join as rows leave."""
    from trainers.rollout.backends.transformers_backend import kv_bytes_per_token

    model, tokenizer = smollm
    tasks = _arithmetic().build(ENV_CONFIG).tasks("eval", 2, seed=1)
    wide = TransformersBackend(model=model, tokenizer=tokenizer, continuous=True)
    expected, _ = _roll_out(wide, tokenizer, tasks, 2)
    row_bytes = (max(len(r.prompt_ids) for r in expected) + 40) * kv_bytes_per_token(model)
    narrow = TransformersBackend(
        model=model, tokenizer=tokenizer, continuous=True, wave_bytes=2 * row_bytes + 1
    )
    got, _ = _roll_out(narrow, tokenizer, tasks, 2)
    _same(expected, got)


def test_budgets_hold_per_row(smollm):
    """`max_new_tokens` ends a turn with `length`; `max_context_tokens` ends the episode `truncated`."""
    model, tokenizer = smollm
    tasks = _arithmetic().build(ENV_CONFIG).tasks("eval", 2, seed=0)
    backend = TransformersBackend(model=model, tokenizer=tokenizer, continuous=True)
    short, _ = _roll_out(backend, tokenizer, tasks, 1, max_new_tokens=3)
    for r in short:
        assert all(len(t.token_ids) <= 3 for t in r.trajectory.turns if t.role == "assistant")
        assert "length" in r.finish_reasons
    context = max(len(r.prompt_ids) for r in short) + 30
    tight, _ = _roll_out(backend, tokenizer, tasks, 1, max_context_tokens=context)
    for r in tight:
        assert len(r.prompt_ids) + len(r.completion_ids) <= context
        assert r.trajectory.status == "truncated"


def test_rows_finish_in_their_own_order_and_get_their_own_next_turns(smollm):
    """The backend API alone: three prompts, greedy; each finished row may come back once with its
    completion appended; every completion equals a plain `generate` of that prompt."""
    model, tokenizer = smollm
    backend = TransformersBackend(model=model, tokenizer=tokenizer, continuous=True)
    prompts = [
        backend.prompt_token_ids([{"role": "user", "content": text}])
        for text in ("Count from one to ten.", "Say hi.", "Name three colours, then stop.")
    ]
    budgets = [24, 6, 16]
    seen: list[tuple[int, list[int]]] = []

    def on_finish(request: Request, completion: Any) -> Request | None:
        seen.append((request.order, request.prompt_ids + completion.token_ids))
        if request.key == "again":
            return None
        return Request(request.prompt_ids + completion.token_ids, 5, key="again", order=request.order)

    with backend.session():
        backend.generate_continuous(
            [Request(p, b, order=i) for i, (p, b) in enumerate(zip(prompts, budgets, strict=True))],
            on_finish,
            temperature=0.0,
        )
    assert sorted(order for order, _ in seen) == [0, 0, 1, 1, 2, 2]
    # The short row's second turn ran, start to end, while the long row was still on its first.
    finishes = [(order, len(ids)) for order, ids in seen]
    assert finishes.index((1, max(n for o, n in finishes if o == 1))) < finishes.index(
        (0, min(n for o, n in finishes if o == 0))
    )
    for i, prompt in enumerate(prompts):
        first, second = [ids for order, ids in seen if order == i]
        [plain] = backend.generate([prompt], max_new_tokens=budgets[i], temperature=0.0)
        assert first == prompt + plain.token_ids
        [again] = backend.generate([first], max_new_tokens=5, temperature=0.0)
        assert second == first + again.token_ids


def test_a_cancel_lands_mid_decode(smollm):
    """A cancel raised during decoding stops the call within a decode step, before any row finishes."""
    model, tokenizer = smollm
    backend = TransformersBackend(model=model, tokenizer=tokenizer, continuous=True)
    prompt = backend.prompt_token_ids([{"role": "user", "content": "Tell me a long story."}])
    steps: list[int] = []
    finished: list[Any] = []

    def should_stop() -> bool:
        steps.append(1)
        return len(steps) > 5

    with pytest.raises(Cancelled), cancellable(should_stop, interval_s=0.0):
        backend.generate_continuous(
            [Request(prompt, 200)], lambda r, c: finished.append(c), temperature=0.0, stop=["</answer>"]
        )
    assert finished == []
