"""The sharded learner: the policy trained by N processes with torch FSDP2, placed by Ray.

`num_learner_workers = N > 1`: the run's own process (the driver: `trainers.recipes.grpo.Trainer`, its `Learner`) keeps a
full copy of the policy for generation, checkpoints in the Hugging Face layout and the weight pushes;
N `LearnerShard` Ray actors hold the trained copy, each with 1/N of every weight, gradient and AdamW
moment (`torch.distributed.fsdp.fully_shard` on every decoder layer and on the root, gloo on a CPU,
NCCL on a GPU). One step:

1. the driver splits the step's micro-batches (`grad_accum_steps`) row by row across the shards and
   sends each shard its rows with the step's loss normalisers (so the shards' losses add up to the
   single-process loss) and the learning rate of the driver's scheduler;
2. each shard runs the same number of forward/backward passes (a shard with no rows in a micro-batch
   runs a zero-weighted dummy, since every FSDP pass is a collective); gradients are reduce-scattered
   and summed (each shard backpropagates N × its share, since FSDP averages over the shards), clipped by the global norm and stepped by AdamW on the
   local shards;
3. the full weights are gathered (`get_model_state_dict(full_state_dict=True, cpu_offload=True)`, rank
   0 holds them), loaded into the driver's copy, and from there pushed to the rollout workers as in a
   single-process run.

Each shard scores its rows with one padded forward pass per micro-batch through the root module (FSDP's
hooks live there), not with the single-process path's shared-prompt KV cache; the two compute the same
log-probs up to float rounding (tests/trainers/learn/test_sharded.py holds them to it).

Checkpoints: the driver writes the usual directory (full weights, trainer state, RNG); the shards add
`sharded/`, a torch.distributed.checkpoint of their model and optimizer shards, written by every rank
in parallel and loadable by any number of shards (DCP reshards on load).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainers.learn.metrics import UpdateTotals
from trainers.run_config import RunConfig

SHARDED_DIR = "sharded"


def _decoder_layers(model: Any) -> list[Any]:
    """The repeated blocks FSDP wraps one by one: the classes the model names in `_no_split_modules`."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    return [m for m in model.modules() if type(m).__name__ in names]


def padded_completion_logprobs(
    model: Any, samples: list[dict[str, Any]], temperature: float, with_entropy: bool = False
) -> tuple[Any, Any, float]:
    """Log-probs of each sample's completion tokens at its mask-1 positions, from one padded forward
    pass of the whole model (prompt + completion, right-padded). Same contract as
    `trainers.learn.losses.completion_logprobs`: (logp (B, L) zero outside the mask, mask (B, L), entropy sum).
    """
    import torch

    device = next(model.parameters()).device
    width = max(len(s["completion_ids"]) for s in samples)
    total = max(len(s["prompt_ids"]) + len(s["completion_ids"]) for s in samples)
    ids = torch.zeros((len(samples), total), dtype=torch.long, device=device)
    attention = torch.zeros((len(samples), total), dtype=torch.long, device=device)
    mask = torch.zeros((len(samples), width), device=device)
    for i, s in enumerate(samples):
        row = list(s["prompt_ids"]) + list(s["completion_ids"])
        ids[i, : len(row)] = torch.tensor(row, device=device)
        attention[i, : len(row)] = 1
        m = s["mask"][: len(s["completion_ids"])]
        mask[i, : len(m)] = torch.tensor(m, device=device, dtype=mask.dtype)
    logits = model(input_ids=ids, attention_mask=attention, use_cache=False).logits
    scale = temperature if temperature > 0 else 1.0
    logp = torch.zeros((len(samples), width), device=device)
    entropy = 0.0
    rows = []
    for i, s in enumerate(samples):
        start, n = len(s["prompt_ids"]), len(s["completion_ids"])
        # Position t predicts token t + 1: the prompt's last position predicts the first completion token.
        step_logp = torch.log_softmax(logits[i, start - 1 : start - 1 + n].float() / scale, dim=-1)
        token_logp = step_logp.gather(-1, ids[i, start : start + n].unsqueeze(-1)).squeeze(-1)
        rows.append(torch.nn.functional.pad(token_logp * mask[i, :n], (0, width - n)))
        if with_entropy:
            with torch.no_grad():
                selected = mask[i, :n].bool()
                entropy += float(-(step_logp[selected].exp() * step_logp[selected]).sum())
    logp = torch.stack(rows)
    return logp, mask, entropy


class LearnerShard:
    """One learner process (wrapped with `ray.remote` at runtime, so importing this module needs no Ray)."""

    def __init__(self, rank: int, world_size: int, config: RunConfig, threads: int = 1) -> None:
        import torch

        torch.set_num_threads(max(threads, 1))
        self.rank, self.world_size, self.config = rank, world_size, RunConfig.build(config)
        self.model: Any = None

    def address(self) -> tuple[str, int]:
        """Where rank 0 listens for the process group: this node's address and a free port."""
        import socket

        import ray

        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def setup(self, master: tuple[str, int], model: Any, device: str) -> int:
        """Join the process group, shard `model` (a full copy, the driver's) and build the optimizer."""
        import torch
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard

        from trainers.models import policy_precision

        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master[0], str(master[1])
        backend = "nccl" if device.startswith("cuda") else "gloo"
        if device.startswith("cuda"):
            import ray

            gpus = ray.get_gpu_ids()
            device = f"cuda:{int(gpus[0])}" if gpus else "cuda:0"
            torch.cuda.set_device(device)
        dist.init_process_group(backend, rank=self.rank, world_size=self.world_size)
        self.device = device
        # The driver loaded the model in the policy's weights dtype (fp32 for `dtype: auto`), so the shards
        # hold fp32 weights, gradients and moments. Mixed precision is the single-process learner's
        # autocast around each forward, not FSDP2's MixedPrecisionPolicy(param_dtype=bf16): that one
        # casts every parameter, norms included, and would run other numerics than the one-process
        # learner that tests/trainers/learn/test_sharded.py holds the shards to; its gain, all-gathers of half
        # the bytes, matters once shards span nodes.
        self.precision = policy_precision(self.config.dtype, device)
        model = model.to(device)
        model.train()
        for layer in _decoder_layers(model):
            fully_shard(layer)
        fully_shard(model)
        self.model = model
        cfg = self.config
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params,
            lr=cfg.learning_rate,
            weight_decay=cfg.weight_decay,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
        )
        return self.rank

    def learn(self, payload: dict[str, Any]) -> UpdateTotals:
        """One update (× updates_per_batch) on this shard's rows: `learner_step`, as in one process; its sums."""
        from trainers.learn.step import MicroBatch, UpdatePlan, learner_step, pad_rows, whole

        cfg = self.config
        for group in self.optimizer.param_groups:
            group["lr"] = payload["lr"]

        def micro_batch(samples: list[dict[str, Any]]) -> MicroBatch | None:
            if not samples:
                return None
            return MicroBatch(
                parts=whole(
                    lambda with_entropy: padded_completion_logprobs(
                        self.model, samples, cfg.temperature, with_entropy=with_entropy
                    )
                ),
                behaviour=[s["behaviour_logprobs"] for s in samples],
                advantages=[s["advantage"] for s in samples],
                token_advantages=[s.get("token_advantages") for s in samples],
                reference=lambda rows, width, device: pad_rows(
                    [samples[j]["ref_logprobs"] for j in rows], width, device
                ),
            )

        plan = UpdatePlan(
            [], payload["num_tokens"], payload["num_sequences"], payload["norm_constant"], [], []
        )
        # Each shard's loss is its rows' share of the step's loss, so the step's gradient is the sum of the
        # shards'; FSDP averages over the shards when it reduce-scatters (gloo has no pre-multiplied sum for
        # `set_gradient_divide_factor(1)`), hence the gradient scale.
        return learner_step(
            [micro_batch(samples) for samples in payload["chunks"]],
            config=cfg,
            params=self.params,
            optimizer=self.optimizer,
            precision=self.precision,
            plan=plan,
            corrected=payload["correct"],
            gradient_scale=float(self.world_size),
            empty_pass=self._empty_pass,
        )

    def _empty_pass(self) -> None:
        """Every forward and backward is a collective: a shard without rows takes part with a pass that adds 0."""
        import torch

        with self.precision.autocast():
            dummy = self.model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=self.device))
        (dummy.logits.sum() * 0.0).backward()

    def full_state_dict(self) -> dict[str, Any] | None:
        """The full weights on rank 0 (None elsewhere); every rank must call it (it gathers)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(
            self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        return state if self.rank == 0 else None

    def full_grads(self) -> dict[str, Any] | None:
        """The full gradients on rank 0 (tests compare them with a single process's)."""
        grads = {}
        for name, p in self.model.named_parameters():
            if p.grad is not None:
                grad = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                grads[name] = grad.detach().cpu()
        return grads if self.rank == 0 else None

    def save(self, path: str) -> None:
        """Write this shard's model and optimizer state into the checkpoint's `sharded/` (DCP)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)

    def load(self, path: str) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        state: dict[str, Any] = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(
            self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )

    def info(self, reset_peak: bool = False) -> dict[str, Any]:
        """This process: rank, pid, resident and peak memory (bytes), and what it holds of the policy."""
        tensors = [p.to_local() if hasattr(p, "to_local") else p for p in self.params]
        state = [
            (v.to_local() if hasattr(v, "to_local") else v)
            for per_param in self.optimizer.state.values()
            for v in per_param.values()
            if hasattr(v, "numel") and v.dim() > 0
        ]
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            **process_memory(reset_peak),
            "local_params": sum(t.numel() for t in tensors),
            "state_bytes": sum(t.numel() * t.element_size() for t in tensors) * 2  # weights + gradients
            + sum(t.numel() * t.element_size() for t in state),  # AdamW moments
        }

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def process_memory(reset_peak: bool = False) -> dict[str, int]:
    """This process's resident memory and its peak since start or the last reset (Linux /proc; bytes).
    `reset_peak` first resets the peak (`clear_refs` 5), so a figure covers only what follows."""
    if reset_peak:
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass  # not Linux, or not allowed: the peak then counts from the start
    values = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    except OSError:
        return {"rss": 0, "peak_rss": 0}
    return {"rss": values.get("VmRSS", 0), "peak_rss": values.get("VmHWM", 0)}


class ShardedLearner:
    """The driver's handle on the N learner shards."""

    shard_class: type = LearnerShard  # the actor body (tests place a stand-in that loads no model)

    def __init__(self, config: RunConfig, model: Any, device: str) -> None:
        import ray

        from trainers.learn.distributed import init_ray, remote_actor

        self.config = config = RunConfig.build(config)  # (a test's plain dict too)
        self.world_size = config.num_learner_workers
        self.started_ray = init_ray(config, learner_device=device)
        # The machine's threads split between the shards (on a cluster, set torch_threads per node).
        threads = max(1, int(config.torch_threads or os.cpu_count() or 1) // self.world_size)
        # One GPU each on a CUDA learner, so Ray places every shard on a node that has one.
        remote: Any = remote_actor(self.shard_class, device)
        self.shards: list[Any] = [
            remote.remote(rank, self.world_size, config, threads) for rank in range(self.world_size)
        ]
        master = ray.get(self.shards[0].address.remote())
        reference = ray.put(model)  # one copy in the object store; each shard keeps its 1/N
        ray.get([s.setup.remote(master, reference, device) for s in self.shards])

    def _all(self, method: str, *args: Any) -> list[Any]:
        return self._get([getattr(s, method).remote(*args) for s in self.shards], method.replace("_", " "))

    def _get(self, refs: list[Any], doing: str) -> list[Any]:
        from trainers.learn.distributed import ray_get

        return ray_get(refs, f"A learner shard (of {self.world_size})", doing)

    def learn(self, payloads: list[dict[str, Any]]) -> list[UpdateTotals]:
        return self._get([s.learn.remote(p) for s, p in zip(self.shards, payloads, strict=True)], "learning")

    def full_state_dict(self) -> dict[str, Any]:
        return self._all("full_state_dict")[0]

    def full_grads(self) -> dict[str, Any]:
        return self._all("full_grads")[0]

    def save(self, checkpoint_dir: str | Path) -> None:
        self._all("save", str(Path(checkpoint_dir) / SHARDED_DIR))

    def load(self, checkpoint_dir: str | Path) -> None:
        self._all("load", str(Path(checkpoint_dir) / SHARDED_DIR))

    def info(self, reset_peak: bool = False) -> list[dict[str, Any]]:
        return self._all("info", reset_peak)

    def close(self) -> None:
        import ray

        if not self.shards:
            return
        from trainers.learn.distributed import RayWorkerDied

        try:
            self._all("close")
        except RayWorkerDied:
            pass  # a shard already died (the run failed saying so); the rest are killed below
        finally:
            for shard in self.shards:
                ray.kill(shard)
            self.shards = []
            if self.started_ray:
                ray.shutdown()


def split_rows(chunks: list[list[int]], world_size: int) -> list[list[list[int]]]:
    """Each micro-batch's rows dealt round-robin to the shards: result[rank][micro-batch] = rows."""
    return [[chunk[rank::world_size] for chunk in chunks] for rank in range(world_size)]


def sample_payload(rollout: Any, mask: list[int], ref_logprobs: list[float] | None) -> dict[str, Any]:
    """What a shard needs of one rollout (token ids, mask, advantages, behaviour log-probs), not its text."""
    return {
        "prompt_ids": list(rollout.prompt_ids),
        "completion_ids": list(rollout.completion_ids),
        "mask": list(mask),
        "advantage": float(rollout.advantage),
        "token_advantages": rollout.token_advantages,
        "behaviour_logprobs": list(rollout.behaviour_logprobs),
        "ref_logprobs": ref_logprobs or [],
    }
