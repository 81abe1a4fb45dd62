"""A training client's requests answered in order, on the worker that holds its model.

`serve` takes requests one at a time from a transport (the worker's: a Redis list per run), answers each
with a result or an error message the SDK shows, and reports what the dashboard draws through the run's
event sink — the same events a GRPO run sends: metrics per forward-backward and optimizer step, each
sampled sequence as a trajectory (decoded text, tokens and log-probs), checkpoints. It returns when
`stop()` names a reason (the client went away, it finished its session) and raises `Cancelled` on a
cancel, so the worker's job wrapper ends the run as for any run.
"""

from __future__ import annotations

import hashlib
import logging
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from trainers.sdk.cancel import Cancelled, stop_requested
from trainers.sdk.events import EventSink, make_event
from trainers.sdk.wire import pack_halves
from trainers.tinker import paths
from trainers.tinker.compute import TinkerModel
from trainers.tinker.losses import LossInputError

log = logging.getLogger(__name__)


class Transport(Protocol):
    def next_request(self, timeout_s: float) -> dict[str, Any] | None: ...

    def reply(self, request_id: str, answer: dict[str, Any]) -> None: ...


@dataclass
class Session:
    """What the loop keeps between requests: the model, where checkpoints go, counters for the events."""

    model: TinkerModel
    model_id: str
    sink: EventSink
    checkpoints_dir: Path
    samples_this_step: int = 0
    trajectories_sent: int = 0
    max_trajectories: int = 20_000
    checkpoint_paths: dict[str, str] = field(default_factory=dict)
    state_steps: set[int] = field(default_factory=set)  # the steps a save_state was reported at
    # A sampling client's run (`create_sampling_client` of a base model or of an ended run's weights):
    # it answers samples only, so the weights it loaded never move.
    sampling_only: bool = False
    # Sampled sequences not yet reported, by their whole token sequence (prompt + completion): a later
    # forward_backward's datum of the same tokens gives its advantage before they go to the dashboard.
    pending: dict[tuple[int, ...], tuple[int, dict[str, Any]]] = field(default_factory=dict)

    @property
    def step(self) -> int:
        """The step a request counts towards: optimizer steps taken + 1 (the first step is 1)."""
        return self.model.version + 1


def serve(session: Session, transport: Transport, stop: Callable[[], str | None]) -> str:
    """Answer requests until `stop()` gives a reason (returned) or the run is cancelled (`Cancelled`)."""
    try:
        while True:
            if stop_requested():
                raise Cancelled("cancelled in the dashboard")
            reason = stop()
            if reason:
                return reason
            request = transport.next_request(1.0)
            if request is None:
                continue
            transport.reply(request["request_id"], answer(session, request))
            if request.get("kind") in REPORTS_SAMPLES:
                report_samples(session)  # after the reply: the client's next request need not wait for it
    finally:
        report_samples(session)


def answer(session: Session, request: Mapping[str, Any]) -> dict[str, Any]:
    """{"result": ...} or {"error": message, "category": "user" | "server"}: a bad request is the
    client's error and the session goes on; so does a server-side failure, reported with its type."""
    kind = request.get("kind", "")
    handler = HANDLERS.get(kind)
    if handler is None:
        return {"error": f"This service does not do {kind!r} requests.", "category": "user"}
    if session.sampling_only and kind not in SAMPLING_KINDS:
        return {
            "error": f"{session.model_id} is a sampling client: it takes no {kind!r}.",
            "category": "user",
        }
    try:
        return {"result": handler(session, request.get("body") or {})}
    except (LossInputError, ValueError, KeyError, TypeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "category": "user"}
    except Cancelled:
        raise
    except Exception as exc:  # noqa: BLE001 — answered, logged and the session goes on
        log.error("tinker %s request failed:\n%s", kind, traceback.format_exc())
        return {"error": f"{type(exc).__name__}: {exc}", "category": "server"}


def _forward(session: Session, body: Mapping[str, Any], *, backward: bool) -> dict[str, Any]:
    attach_advantages(session, body["data"])
    result = session.model.forward_backward(
        body["data"], body.get("loss_fn", "cross_entropy"), body.get("loss_fn_config"), backward=backward
    )
    prefix = "" if backward else "forward/"
    session.sink.emit(
        make_event(
            "metrics",
            step=session.step,
            values={f"{prefix}{k}": v for k, v in result.metrics.items() if k != "loss:sum"},
        )
    )
    return {
        "loss_fn_output_type": "ArrayRecord",
        "loss_fn_outputs": result.outputs,
        "metrics": {"loss:sum": result.metrics["loss:sum"]},
    }


def handle_forward_backward(session: Session, body: Mapping[str, Any]) -> dict[str, Any]:
    return _forward(session, body, backward=not body.get("forward_only", False))


def handle_optim_step(session: Session, body: Mapping[str, Any]) -> dict[str, Any]:
    step = session.step
    metrics = session.model.optim_step(body.get("adam_params") or {})
    session.samples_this_step = 0
    session.sink.emit(make_event("metrics", step=step, values=metrics))
    return {"metrics": metrics}


def _checkpoint(session: Session, kind: str, name: str, *, with_optimizer: bool) -> str:
    """Save under the run's artifacts, tell the dashboard (a Checkpoint row) and answer the tinker:// path.

    The dashboard keeps one checkpoint per step, so sampler weights saved at a step that already has a
    `save_state` are not reported over it: the state (what a resume loads) holds the same weights."""
    safe = paths.safe_name(name)
    target = session.checkpoints_dir / kind / safe
    step = session.model.version
    session.model.save(target, step=step, with_optimizer=with_optimizer)
    if with_optimizer or step not in session.state_steps:
        session.sink.emit(make_event("checkpoint", step=step, path=str(target), kind="adapter"))
    if with_optimizer:
        session.state_steps.add(step)
    path = paths.form(session.model_id, kind, safe)
    session.checkpoint_paths[path] = str(target)
    return path


def handle_save_weights(session: Session, body: Mapping[str, Any]) -> dict[str, Any]:
    name = body.get("path") or f"step-{session.model.version:06d}"
    return {"path": _checkpoint(session, "weights", name, with_optimizer=True)}


def handle_save_weights_for_sampler(session: Session, body: Mapping[str, Any]) -> dict[str, Any]:
    sampler_id = body.get("sampler_id") or f"{session.model_id}:sampler:{session.model.version}"
    session.model.freeze_for_sampler(sampler_id)
    if body.get("path"):
        path = _checkpoint(session, "sampler_weights", body["path"], with_optimizer=False)
        session.model.samplers[path] = session.model.samplers[sampler_id]
        return {"path": path, "sampling_session_id": sampler_id}
    return {"sampling_session_id": sampler_id}


def handle_load_weights(session: Session, body: Mapping[str, Any]) -> dict[str, Any]:
    local = body.get("local_path") or session.checkpoint_paths.get(body.get("path", ""))
    if not local or not Path(local).is_dir():
        raise ValueError(f"No checkpoint at {body.get('path')!r} that this service saved.")
    session.model.load(Path(local), with_optimizer=bool(body.get("optimizer")))
    return {"path": body.get("path"), "model_id": session.model_id}


def sampler_of(session: Session, sampler_id: str | None) -> str | None:
    """The sampler a request names, made ready: a `tinker://` path of this client's saves samples that
    save's weights (loaded from its directory the first time); a path it never saved is refused rather
    than answered with the current weights."""
    if not sampler_id or not sampler_id.startswith(paths.SCHEME) or sampler_id in session.model.samplers:
        return sampler_id
    local = session.checkpoint_paths.get(sampler_id)
    if local is None:
        raise ValueError(f"No weights saved at {sampler_id} by this training client.")
    session.model.freeze_saved(sampler_id, Path(local))
    return sampler_id


def handle_sample(session: Session, body: Mapping[str, Any]) -> dict[str, Any]:
    prompt = [int(t) for t in body["prompt"]]
    sampler_id = sampler_of(session, body.get("sampler_id"))
    sequences: list[dict[str, Any]] = []
    if int(body.get("num_samples", 1)) > 0 and (body.get("sampling_params") or {}).get("max_tokens", 1) != 0:
        sequences = session.model.sample(
            prompt, int(body.get("num_samples", 1)), body.get("sampling_params") or {}, sampler_id
        )
    result: dict[str, Any] = {"sequences": sequences}
    if body.get("prompt_logprobs"):
        result["prompt_logprobs"] = session.model.prompt_logprobs(prompt, sampler_id)
    # A training client's base-model samples are not its policy's: its run's trajectories leave them out.
    policy = session.sampling_only or sampler_id != paths.BASE_SAMPLER
    if sequences and not body.get("prompt_logprobs") and policy:
        _report_samples(session, prompt, sequences)
    return result


def _report_samples(session: Session, prompt: list[int], sequences: list[dict[str, Any]]) -> None:
    """Keep each sampled sequence as a trajectory of the step — the decoded prompt and completion with its
    tokens and log-probs (the token view) — until a later request reports it (`report_samples`)."""
    if session.trajectories_sent + len(session.pending) >= session.max_trajectories:
        return
    decode = session.model.tokenizer.decode
    prompt_text = decode(prompt, skip_special_tokens=False)
    task_id = "prompt-" + hashlib.sha256(repr(prompt).encode()).hexdigest()[:12]
    for index, seq in enumerate(sequences):
        tokens = seq["tokens"]
        turns = [
            {"role": "user", "text": prompt_text, "token_ids": prompt, "loss_mask": [0] * len(prompt)},
            {
                "role": "assistant",
                "text": decode(tokens, skip_special_tokens=False),
                "token_ids": tokens,
                "loss_mask": [1] * len(tokens),
                "token_stats": {"logprob": pack_halves(seq["logprobs"])} if tokens else None,
            },
        ]
        item = {
            "group": session.samples_this_step,
            "sample": index,
            "task_id": task_id,
            "reward": 0.0,
            "turns": turns,
            "prompt": prompt_text,
            "status": "truncated" if seq["stop_reason"] == "length" else "ok",
            "policy_version": session.model.version,
            "prompt_tokens": len(prompt),
            "completion_tokens": len(tokens),
        }
        session.pending[(*prompt, *tokens, len(session.pending))] = (session.step, item)
    session.samples_this_step += 1


def attach_advantages(session: Session, datums: Sequence[Mapping[str, Any]]) -> None:
    """A datum built from a pending sample (its tokens + its last target are the sample's prompt and
    completion, as the cookbook's rl_loop builds them) gives that sample its advantage: the sample's
    own, and per token on the completion (the token view's advantage stat)."""
    by_sequence: dict[tuple[int, ...], list[dict[str, Any]]] = {}
    for key, (_, item) in session.pending.items():
        by_sequence.setdefault(key[:-1], []).append(item)  # identical samples share their advantage
    for datum in datums:
        advantages = datum.get("inputs", {}).get("advantages")
        targets = datum.get("inputs", {}).get("target_tokens")
        if not advantages or not targets or not targets["data"]:
            continue
        for item in by_sequence.get((*datum["tokens"], int(targets["data"][-1])), []):
            completion = item["turns"][-1]
            n = len(completion["token_ids"])
            per_token = [float(a) for a in advantages["data"][-n:]] if n else []
            item["advantage"] = per_token[-1] if per_token else 0.0
            if per_token and completion.get("token_stats") is not None:
                completion["token_stats"]["advantage"] = pack_halves(per_token)


def report_samples(session: Session) -> None:
    """Send the pending samples to the dashboard, a trajectories event per step they were drawn at."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for step, item in session.pending.values():
        by_step.setdefault(step, []).append(item)
    session.pending.clear()
    for step, items in sorted(by_step.items()):
        session.trajectories_sent += len(items)
        session.sink.emit(make_event("trajectories", step=step, items=items))


def handle_create_model(session: Session, body: Mapping[str, Any]) -> dict[str, Any]:
    """The first request of every client: answered once its model is loaded here."""
    return {"model_id": session.model_id}


HANDLERS: dict[str, Callable[[Session, Mapping[str, Any]], dict[str, Any]]] = {
    "create_model": handle_create_model,
    "forward_backward": handle_forward_backward,
    "optim_step": handle_optim_step,
    "save_weights": handle_save_weights,
    "save_weights_for_sampler": handle_save_weights_for_sampler,
    "load_weights": handle_load_weights,
    "sample": handle_sample,
}
SAMPLING_KINDS = {"create_model", "sample"}
# The requests after which what was sampled before is reported: its step is over (optim_step) or new
# weights are saved for sampling; serve() reports the rest when the session ends.
REPORTS_SAMPLES = {"optim_step", "save_weights", "save_weights_for_sampler", "load_weights"}
