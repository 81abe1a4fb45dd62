"""Rollout workers as Ray actors.

The learner keeps the trainable model; `num_rollout_workers` actors each hold a generation copy
(transformers on CPU, or vLLM on a GPU), build their own environments from the run config, and
return finished, token-level rollouts. After every update the learner puts the new weights in the
object store once (`ray.put`) and every actor loads them; Ray runs an actor's calls in submission
order, so a generation submitted after an update always sees the new weights.

One-step off-policy: the trainer submits step n+1's generation before it updates on step n, so
generation and the update overlap; the batch is then one policy version stale and the loss uses
the actors' own (behaviour) log-probs as the "old" policy in the importance ratio.

`RAY_ADDRESS` set: join that cluster (its nodes must have this package installed). Otherwise a
local Ray starts with one CPU per worker.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class RolloutWorker:
    """The actor body (wrapped with `ray.remote` at runtime, so importing this module needs no Ray)."""

    def __init__(self, config: dict[str, Any], index: int, threads: int = 1) -> None:
        import torch

        torch.set_num_threads(max(threads, 1))
        from trainers.backends import make_backend
        from trainers.models import load_model, load_tokenizer
        from trainers.registry import environment_kind
        from trainers.rollout import ChatFormat
        from trainers.toolformats import resolve_tool_format

        self.config = config
        self.index = index
        self.tokenizer = load_tokenizer(config["model"])
        self.backend: Any  # the generation backend; the transformers one also exposes `.model`
        if config["backend"] == "vllm":
            self.backend = make_backend(
                "vllm", model_name=config["model"], tokenizer=self.tokenizer, seed=config["seed"]
            )
        else:
            # A plain model even for LoRA runs: the learner pushes merged weights. It only samples, so it is
            # held in the learner's compute dtype (models.inference_dtype: bf16 on CUDA for `dtype: auto`,
            # while the learner keeps fp32 weights) or in `generation_dtype`.
            dtype = (
                config["dtype"]
                if config.get("generation_dtype", "auto") == "auto"
                else config["generation_dtype"]
            )
            self.model = load_model(config["model"], config["device"], dtype).eval()
            self.backend = make_backend("transformers", model=self.model, tokenizer=self.tokenizer)
        self.chat = ChatFormat(
            self.tokenizer, resolve_tool_format(config.get("tool_format", "auto"), self.tokenizer)
        )
        spec = environment_kind(config["environment"]["kind"])
        env_config = dict(config["environment"].get("config") or {})
        self.make_env: Callable[[], Any] = lambda: spec.build(env_config)
        probe = self.make_env()
        stop = getattr(probe, "stop", None)
        self.stop = tuple(stop) if stop is not None else self.chat.tool_format.stop
        if hasattr(probe, "close"):
            probe.close()
        self.version = 0

    def generate(self, tasks: list[Any], seeds: list[list[int]], options: dict[str, Any]) -> list[list[Any]]:
        from trainers.rollout import generate_rollouts

        cfg = self.config
        return generate_rollouts(
            self.backend,
            self.chat,
            self.make_env,
            tasks,
            seeds,
            max_turns=options["max_turns"],
            max_new_tokens=cfg["max_new_tokens"],
            max_context_tokens=cfg["max_context_tokens"],
            temperature=options["temperature"],
            top_p=cfg["top_p"],
            generation_seed=options["generation_seed"],
            stop=self.stop,
            policy_version=self.version,
            split=options["split"],
            first_group=options["first_group"],
        )

    def update_weights(self, state_dict: dict[str, Any], version: int) -> int:
        self.backend.update_weights(state_dict)
        self.version = version
        return version

    def weights_digest(self) -> str:
        """A hash of the generation weights (tests compare it with the learner's)."""
        return state_digest(self.backend.model.state_dict())

    def info(self) -> dict[str, Any]:
        return {"index": self.index, "pid": os.getpid(), "version": self.version}


def state_digest(state_dict: dict[str, Any]) -> str:
    digest = hashlib.sha256()
    for key in sorted(state_dict):
        digest.update(key.encode())
        digest.update(state_dict[key].detach().float().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def ray_cpus(config: dict[str, Any]) -> int:
    """CPUs a local Ray needs for the run: one per rollout worker and one per learner shard."""
    learners = config.get("num_learner_workers", 1)
    return max(1, config.get("num_rollout_workers", 0) + (learners if learners > 1 else 0))


def init_ray(config: dict[str, Any]) -> bool:
    """Join `RAY_ADDRESS` or start a local Ray sized for the run; returns True when this call started Ray.

    Either way the Ray it joins must have room for every actor the run places (`ray_cpus`): an actor
    Ray cannot place waits forever, so a run on too small a cluster fails here, saying so."""
    import ray

    started = False
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=ray_cpus(config), include_dashboard=False, log_to_driver=False)
        started = True
    needed = ray_cpus(config)
    cpus = ray.cluster_resources().get("CPU", 0)
    if cpus < needed:
        if started:
            ray.shutdown()
        raise RuntimeError(
            f"The Ray cluster has {cpus:g} CPUs but this run places {needed} actors of one CPU each "
            f"({config.get('num_rollout_workers', 0)} rollout workers"
            + (
                f" + {config['num_learner_workers']} learner shards"
                if config.get("num_learner_workers", 1) > 1
                else ""
            )
            + "): Ray would wait for room forever. Lower num_rollout_workers / num_learner_workers or "
            "add nodes to the cluster."
        )
    return started


class RayWorkerDied(RuntimeError):
    """A rollout worker's or learner shard's process ended under a running step."""


def ray_get(refs: list[Any], who: str, doing: str) -> list[Any]:
    """`ray.get`, except that an actor whose process died (killed, out of memory, node lost) fails the
    step with a sentence saying who and what it was doing: Ray does not restart our actors, and a run
    that stops saying why can be resumed, where one that waits cannot."""
    import ray

    try:
        # One at a time as they finish: when a learner shard dies its peers wait on it inside a
        # collective, so waiting for all of them first would wait for gloo's half-hour time-out.
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            ray.get(ready)
        return ray.get(refs)
    except ray.exceptions.RayActorError as exc:
        text = str(exc).strip()
        cause = text.splitlines()[0] if text else type(exc).__name__
        raise RayWorkerDied(
            f"{who} died while {doing}: {cause} The run stops here; resume it from its last "
            "checkpoint (or turn on auto_resume)."
        ) from exc


class RayRollouts:
    """The trainer's rollout source backed by `num_rollout_workers` Ray actors."""

    def __init__(
        self,
        config: dict[str, Any],
        initial_state: Callable[[], dict[str, Any]] | None = None,
        initial_version: int = 0,
    ) -> None:
        import ray

        self.config = config
        workers = config["num_rollout_workers"]
        self.started_ray = init_ray(config)
        remote = ray.remote(num_cpus=1)(RolloutWorker)
        self.actors: list[Any] = [remote.remote(config, i, 1) for i in range(workers)]
        self._pending_updates: list[Any] = []
        # Surface load errors here, not mid-step; the pids name the workers when one dies later.
        self.pids = [info["pid"] for info in ray.get([a.info.remote() for a in self.actors])]
        if initial_state is not None and initial_version > 0:
            self.update_weights(initial_state, initial_version)

    def submit(
        self,
        tasks: list[Any],
        seeds: list[list[int]],
        *,
        max_turns: int,
        generation_seed: int,
        policy_version: int,
        temperature: float | None = None,
        split: str = "train",
        first_group: int = 0,
    ) -> list[Any]:
        """Start generating; returns futures (one per actor chunk) for `collect`."""
        temperature = self.config["temperature"] if temperature is None else temperature
        futures = []
        chunk = -(-len(tasks) // len(self.actors)) if tasks else 0
        for a, start in enumerate(range(0, len(tasks), chunk or 1)):
            options = {
                "max_turns": max_turns,
                "temperature": temperature,
                "generation_seed": generation_seed + a,
                "split": split,
                "first_group": first_group + start,
            }
            futures.append(
                self.actors[a].generate.remote(
                    tasks[start : start + chunk], seeds[start : start + chunk], options
                )
            )
        return futures

    def collect(self, futures: list[Any]) -> list[list[Any]]:
        if self._pending_updates:
            self._get(self._pending_updates, "loading new weights")  # raise a failed weight load here
            self._pending_updates = []
        return [group for part in self._get(futures, "generating") for group in part]

    def _get(self, refs: list[Any], doing: str) -> list[Any]:
        return ray_get(refs, f"A rollout worker (pids {', '.join(map(str, self.pids))})", doing)

    def generate(self, tasks: list[Any], seeds: list[list[int]], **kwargs: Any) -> list[list[Any]]:
        return self.collect(self.submit(tasks, seeds, **kwargs))

    def update_weights(self, state_dict_fn: Callable[[], dict[str, Any]], version: int) -> None:
        import ray

        reference = ray.put({k: v.detach().cpu() for k, v in state_dict_fn().items()})
        self._pending_updates += [a.update_weights.remote(reference, version) for a in self.actors]

    def weights_digests(self) -> list[str]:
        return self._get([a.weights_digest.remote() for a in self.actors], "reporting its weights")

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
        if self.started_ray:
            ray.shutdown()
