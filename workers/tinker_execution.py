"""A Tinker training client's run on a worker: load its model, answer its requests until it goes away.

Claimed, heartbeated, cancelled and failed like every run (`workers.execution`, `workers.jobs.run_job`);
the requests come through Redis (`webapp.tinker.transport`) and are answered by `trainers.tinker.serve`,
which reports metrics, samples and checkpoints through the same event sink a GRPO run uses. When the
client stops heartbeating (TINKER_SESSION_TIMEOUT_S) or finishes its session the run ends SUCCEEDED and
the worker is free; a cancel ends it CANCELLED, and every request still queued — and every later one —
fails with a message that says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from webapp.experiments.models import Run
from webapp.tinker import transport
from webapp.tinker.services import ended_message, model_id_of

log = logging.getLogger(__name__)


class RedisTransport:
    """The serve loop's transport: the run's request list, answers to the futures the SDK polls."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.conn = transport.client()
        self.kinds: dict[str, str] = {}

    def next_request(self, timeout_s: float) -> dict[str, Any] | None:
        request = transport.take_request(self.run_id, timeout_s, self.conn)
        if request is not None:
            self.kinds[request["request_id"]] = request.get("kind", "")
        return request

    def reply(self, request_id: str, answer: dict[str, Any]) -> None:
        transport.put_answer(request_id, {**answer, "kind": self.kinds.pop(request_id, "")})


def serve_tinker_run(run: Run, sink: Any, out_dir: Any, cancel: Callable[[], bool]) -> str:
    from pathlib import Path

    from trainers.models import model_dir
    from trainers.sdk.events import make_event
    from trainers.tinker.compute import LoraSpec, TinkerModel
    from trainers.tinker.serve import Session, serve

    config = run.resolved_config
    session_id = config.get("session_id", "")
    lora = config.get("lora") or {}
    sampler = config.get("sampler")  # a sampling client's run: what it samples
    sink.emit(make_event("status", status="RUNNING"))
    loading = f"Loading {config['base_model']} with LoRA rank {lora.get('rank')}"
    if sampler:
        loading = f"Loading {sampler.get('path') or config['base_model']} to sample from"
    sink.emit(make_event("log", level="info", message=loading))
    model = TinkerModel(
        config["model"],
        LoraSpec(
            rank=int(lora.get("rank", 32)),
            train_attn=bool(lora.get("train_attn", True)),
            train_mlp=bool(lora.get("train_mlp", True)),
            seed=lora.get("seed"),
        ),
        device="cuda" if run.queue == "gpu" else "auto",
    )
    if sampler and sampler.get("local_path"):
        model.load(Path(sampler["local_path"]), with_optimizer=False)
    model_id = model_id_of(run)
    transport.put_json(transport.model_info_key(run.pk), {"tokenizer_id": model_dir(config["model"])})
    session = Session(
        model=model,
        model_id=model_id,
        sink=sink,
        checkpoints_dir=out_dir / "tinker",
        sampling_only=bool(sampler),
    )
    what = "sampling client" if sampler else "training client"
    sink.emit(make_event("log", level="info", message=f"Serving {what} {model_id} (session {session_id})"))

    def stop() -> str | None:
        if session_id and not transport.session_alive(session_id):
            return "the client ended its session or stopped heartbeating"
        return None

    channel = RedisTransport(run.pk)
    try:
        reason = serve(session, channel, stop)
    finally:
        fail_pending(run.pk)
    sink.emit(make_event("log", level="info", message=f"Session over: {reason}"))
    sink.emit(make_event("status", status="SUCCEEDED", step=model.version))
    if sampler:
        return f"served ({session.trajectories_sent} samples)"
    return f"served ({model.version} optimizer steps)"


def fail_pending(run_id: int) -> None:
    """Answer every request still queued for the run: the client's next call learns why it ended."""
    run = Run.objects.get(pk=run_id)
    message = ended_message(run) or f"Run #{run_id} stopped serving this training client: no more requests."
    for request in transport.pending_requests(run_id):
        transport.put_answer(request["request_id"], {"error": message, "category": "user"})
