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
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from trainers.parts import build_part
from trainers.run_config import RunConfig
from trainers.sdk.cancel import check_cancel

log = logging.getLogger(__name__)


class RolloutWorker:
    """The actor body (wrapped with `ray.remote` at runtime, so importing this module needs no Ray)."""

    def __init__(self, config: RunConfig, index: int, threads: int = 1) -> None:
        import torch

        torch.set_num_threads(max(threads, 1))
        from trainers.models import load_model, load_tokenizer
        from trainers.registry import environment_kind
        from trainers.rollout.backends import make_backend
        from trainers.rollout.chat import ChatFormat
        from trainers.rollout.toolformats import resolve_tool_format

        self.config = config = RunConfig.build(config)  # (a test's plain dict too)
        self.index = index
        self.tokenizer = load_tokenizer(config.model)
        self.backend: Any  # the generation backend; the transformers one also exposes `.model`
        if config.backend == "vllm":
            self.backend = make_backend(
                "vllm", model_name=config.model, tokenizer=self.tokenizer, seed=config.seed
            )
        else:
            # A plain model even for LoRA runs: the learner pushes merged weights. It only samples, so it is
            # held in the learner's compute dtype (models.inference_dtype: bf16 on CUDA for `dtype: auto`,
            # while the learner keeps fp32 weights) or in `generation_dtype`.
            dtype = config.dtype if config.generation_dtype == "auto" else config.generation_dtype
            self.model = load_model(config.model, config.device, dtype).eval()
            self.backend = make_backend("transformers", model=self.model, tokenizer=self.tokenizer)
        self.chat = ChatFormat(self.tokenizer, resolve_tool_format(config.tool_format, self.tokenizer))
        spec = environment_kind(config.environment.kind)
        env_config = dict(config.environment.config)
        self.make_env: Callable[[], Any] = lambda: spec.build(env_config)
        probe = self.make_env()
        stop = getattr(probe, "stop", None)
        self.stop = tuple(stop) if stop is not None else self.chat.tool_format.stop
        if hasattr(probe, "close"):
            probe.close()
        self.version = 0
        self.strategy = build_part("rollout_strategy", config)  # the run's (trainers.parts)

    def generate(self, tasks: list[Any], seeds: list[list[int]], options: dict[str, Any]) -> list[list[Any]]:
        cfg = self.config
        return self.strategy.generate(
            self.backend,
            self.chat,
            self.make_env,
            tasks,
            seeds,
            max_turns=options["max_turns"],
            max_new_tokens=cfg.max_new_tokens,
            max_context_tokens=cfg.max_context_tokens,
            temperature=options["temperature"],
            top_p=cfg.top_p,
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
        return state_digest(self.backend.state_dict())

    def info(self) -> dict[str, Any]:
        return {"index": self.index, "pid": os.getpid(), "version": self.version}


def state_digest(state_dict: dict[str, Any]) -> str:
    digest = hashlib.sha256()
    for key in sorted(state_dict):
        digest.update(key.encode())
        digest.update(state_dict[key].detach().float().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def ray_cpus(config: RunConfig | Mapping[str, Any]) -> int:
    """CPUs a local Ray needs for the run: one per rollout worker and one per learner shard
    (`ray_resources_needed`), at least one."""
    return int(ray_resources_needed(config)["CPU"])


def actor_options(device: str) -> dict[str, Any]:
    """What one rollout worker or learner shard asks Ray for (`ray.remote(**options)`): a CPU, and a GPU
    when it runs on CUDA (a "cuda…" device: the run's own, or "auto" resolved by the learner, see
    `rollout_device`). Asking is what places it: Ray puts an actor that asks for a GPU only on a node that
    declares one. The one rule for both kinds of actor, and for the sizing check (`ray_resources_needed`)."""
    return {"num_cpus": 1, "num_gpus": 1 if str(device).startswith("cuda") else 0}


def remote_actor(cls: type, device: str) -> Any:
    """`cls` as a Ray actor class asking for what `actor_options(device)` says."""
    import ray

    return ray.remote(**actor_options(device))(cls)


def rollout_device(config: RunConfig | Mapping[str, Any], learner_device: str | None = None) -> str:
    """The device a run's rollout workers ask Ray for: the run's `device`, or for "auto" the learner's
    resolved one when known — the run's driver decides for the whole run, so a run that starts on a GPU
    worker rolls out on nodes with GPUs (placed there by asking), and one on a CPU worker stays on CPUs.
    (Before, "auto" asked for no GPU and its actors could land on a CPU-only node beside the GPU one.)"""
    device = RunConfig.build(config).device
    return learner_device if device == "auto" and learner_device else device


def ray_resources_needed(
    config: RunConfig | Mapping[str, Any], learner_device: str | None = None
) -> dict[str, float]:
    """What the run's actors ask Ray for in all: `actor_options` summed over its `num_rollout_workers`
    (on `rollout_device`) and, when `num_learner_workers` > 1, its learner shards (on `learner_device`,
    the learner's resolved device, or the run's `device`)."""
    cfg = RunConfig.build(config)
    device, learners = cfg.device, cfg.num_learner_workers
    actors = [(cfg.num_rollout_workers, actor_options(rollout_device(cfg, learner_device)))]
    if learners > 1:
        actors.append((learners, actor_options(learner_device or device)))
    cpus = sum(count * options["num_cpus"] for count, options in actors)
    needed: dict[str, float] = {"CPU": float(max(1, cpus))}
    gpus = sum(count * options["num_gpus"] for count, options in actors)
    if gpus:
        needed["GPU"] = float(gpus)
    return needed


def ray_shortfall(needed: dict[str, float], cluster: dict[str, float]) -> str | None:
    """Why a cluster with `cluster` resources (ray.cluster_resources()) cannot place every actor of a run
    needing `needed` (CPUs, GPUs or any custom resource), or None when it can: an actor Ray cannot place
    waits forever, so the run is refused when it starts (`init_ray`), naming the resources it lacks."""
    short = {
        name: (amount, cluster.get(name, 0))
        for name, amount in needed.items()
        if cluster.get(name, 0) < amount
    }
    if not short:
        return None
    missing = ", ".join(
        f"{amount:g} {name} (the cluster has {have:g})" for name, (amount, have) in short.items()
    )
    return (
        f"The Ray cluster is too small for this run: it needs {missing}. Ray would wait for room forever. "
        "Lower num_rollout_workers / num_learner_workers or add nodes (with GPUs, for a CUDA run) to the cluster."
    )


def uses_ray(config: RunConfig | Mapping[str, Any]) -> bool:
    """Whether the run places Ray actors at all: rollout workers, or more than one learner shard."""
    cfg = RunConfig.build(config)
    return cfg.num_rollout_workers > 0 or cfg.num_learner_workers > 1


def cluster_for_run(
    config: RunConfig | Mapping[str, Any], reported: dict[str, float], *, local: bool
) -> dict[str, float]:
    """The Ray cluster a run would meet on a worker that `reported` these totals (ray.cluster_resources()
    of the cluster at its RAY_ADDRESS, or — `local`, no address — what a Ray on its machine detects):
    `init_ray` starts a local Ray with `ray_cpus(config)` CPUs, sized for the run, and the GPUs the
    machine has, so a local cluster is never short of CPUs."""
    return {**reported, "CPU": float(ray_cpus(config))} if local else dict(reported)


def launch_shortfall(
    config: RunConfig | Mapping[str, Any], reported: dict[str, float], *, local: bool
) -> str | None:
    """`ray_shortfall` of the run on the cluster a worker reported, asked before the run is queued (the
    web's launch check, `webapp.fleet.models.WorkerNode.launch_shortfall`); None when the run places no
    Ray actors or the cluster holds them. The same rule as `init_ray`, which the trainer asks again."""
    if not uses_ray(config):
        return None
    return ray_shortfall(ray_resources_needed(config), cluster_for_run(config, reported, local=local))


def init_ray(config: RunConfig, learner_device: str | None = None) -> bool:
    """Join `RAY_ADDRESS` or start a local Ray sized for the run; returns True when this call started Ray.

    Either way the Ray it joins must have room for every actor the run places (`ray_resources_needed`:
    CPUs, and GPUs for a CUDA run): an actor Ray cannot place waits forever, so a run on too small a
    cluster fails here, before any actor is created, saying what it lacks."""
    import ray

    started = False
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=ray_cpus(config), include_dashboard=False, log_to_driver=False)
        started = True
    shortfall = ray_shortfall(ray_resources_needed(config, learner_device), ray.cluster_resources())
    if shortfall:
        if started:
            ray.shutdown()
        raise RuntimeError(shortfall)
    return started


class RayWorkerDied(RuntimeError):
    """A rollout worker's or learner shard's process ended under a running step."""


# How long a failed task's error waits for word of a dead peer (Ray reports a SIGKILL'd actor in well
# under a second; a collective's peers fail as soon as their connection to it drops, often sooner).
PEER_DEATH_GRACE_S = 10.0


def ray_get(refs: list[Any], who: str, doing: str) -> list[Any]:
    """`ray.get`, except that an actor whose process died (killed, out of memory, node lost) fails the
    step with a sentence saying who and what it was doing: Ray does not restart our actors, and a run
    that stops saying why can be resumed, where one that waits cannot. A task that failed because a
    peer died under it (a learner shard's collective: gloo's "Connection reset by peer") says the
    death too: the peer's error is only its echo."""
    import ray

    try:
        # One at a time as they finish: when a learner shard dies its peers wait on it inside a
        # collective, so waiting for all of them first would wait for gloo's half-hour time-out.
        # Waiting a second at a time: a cancel lands while the workers generate (trainers.sdk.cancel).
        pending = list(refs)
        while pending:
            check_cancel()
            ready, pending = ray.wait(pending, num_returns=1, timeout=1.0)
            if ready:
                try:
                    ray.get(ready)
                except ray.exceptions.RayTaskError:
                    death = _death_among(pending)
                    if death is None:
                        raise
                    raise death from None
        return ray.get(refs)
    except ray.exceptions.RayActorError as exc:
        text = str(exc).strip()
        cause = text.splitlines()[0] if text else type(exc).__name__
        raise RayWorkerDied(
            f"{who} died while {doing}: {cause} The run stops here; resume it from its last "
            "checkpoint (or turn on auto_resume)."
        ) from exc


def _death_among(refs: list[Any], grace_s: float = PEER_DEATH_GRACE_S) -> Any:
    """The RayActorError of the first of `refs` whose actor turns out dead within `grace_s`, else None
    (peers still in a collective are not waited for past it)."""
    import ray

    deadline = time.monotonic() + grace_s
    pending = list(refs)
    while pending and (left := deadline - time.monotonic()) > 0:
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        for ref in ready:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                return exc
            except Exception:  # noqa: BLE001, S112 — another echo of the same failure: look on
                continue
    return None


class RayRollouts:
    """The trainer's rollout source backed by `num_rollout_workers` Ray actors."""

    worker_class: type = RolloutWorker  # the actor body (tests place a stand-in that loads no model)

    def __init__(
        self,
        config: RunConfig,
        initial_state: Callable[[], dict[str, Any]] | None = None,
        initial_version: int = 0,
        learner_device: str | None = None,
    ) -> None:
        import ray

        self.config = config = RunConfig.build(config)
        workers = config.num_rollout_workers
        self.started_ray = init_ray(config, learner_device)
        # A CUDA run's rollout workers each ask for a GPU, so Ray places them on a node that has one.
        remote = remote_actor(self.worker_class, rollout_device(config, learner_device))
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
        temperature = self.config.temperature if temperature is None else temperature
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
        return [group for part in self.collect_ready(futures) for group in part]

    def collect_ready(self, futures: list[Any]) -> Iterator[list[list[Any]]]:
        """The groups of each worker's chunk as soon as that worker finishes it (the trainer scores and
        reports them while the others still generate)."""
        import ray

        if self._pending_updates:
            self._get(self._pending_updates, "loading new weights")  # raise a failed weight load here
            self._pending_updates = []
        pending = list(futures)
        while pending:
            check_cancel()  # a second at a time: a cancel lands while the workers generate
            ready, pending = ray.wait(pending, num_returns=1, timeout=1.0)
            for ref in ready:
                yield self._get([ref], "generating")[0]

    def _get(self, refs: list[Any], doing: str) -> list[Any]:
        return ray_get(refs, f"A rollout worker (pids {', '.join(map(str, self.pids))})", doing)

    def generate(self, tasks: list[Any], seeds: list[list[int]], **kwargs: Any) -> list[list[Any]]:
        return self.collect(self.submit(tasks, seeds, **kwargs))

    def update_weights(self, state_dict_fn: Callable[[], dict[str, Any]], version: int) -> None:
        import ray

        reference = ray.put({k: v.detach().cpu() for k, v in state_dict_fn().items()})
        self._pending_updates += [a.update_weights.remote(reference, version) for a in self.actors]

    def release_weights(self) -> bool:
        """The workers' weights are their own processes' memory: nothing to give back here."""
        return False

    def weights_digests(self) -> list[str]:
        return self._get([a.weights_digest.remote() for a in self.actors], "reporting its weights")

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
        if self.started_ray:
            ray.shutdown()
