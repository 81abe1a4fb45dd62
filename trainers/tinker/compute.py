"""One Tinker training client's model on a worker: a LoRA policy, its optimizer and its sampler.

The service's requests arrive here as plain data (the web app decodes the SDK's protobuf and JSON bodies):
a datum is {"tokens": [...], "inputs": {name: {"data": [...], "dtype": ..., "shape": [...]}}}. Gradients
accumulate over `forward_backward` calls until `optim_step`, as the Tinker API says. The parts are ours:
the model and LoRA from `trainers.models`, the policy loss from `trainers.learn.losses`, checkpoints from
`trainers.learn.checkpoint`, sampling through the transformers generation backend — on a CPU with bf16
matrix units from a bf16 copy with the adapters merged in (`lora_sampling_copy_dtype`), as the GRPO demo
samples: its log-probs are that sampler's, as a hosted Tinker sampler's are its engine's, while `forward`
and `compute_logprobs` score with the trained policy itself.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainers.learn import checkpoint
from trainers.learn.losses import _decoder_and_head, _token_logprobs
from trainers.learn.metrics import service_pass_metrics, service_step_metrics
from trainers.models import (
    apply_lora,
    load_model,
    load_tokenizer,
    lora_sampling_copy_dtype,
    merged_state_dict,
    policy_precision,
    resolve_device,
)
from trainers.tinker.losses import LossInputError, tinker_loss
from trainers.tinker.paths import BASE_SAMPLER

ATTENTION_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP_MODULES = ["gate_proj", "up_proj", "down_proj"]
LORA_ALPHA = 32


@dataclass(frozen=True)
class LoraSpec:
    rank: int = 32
    train_attn: bool = True
    train_mlp: bool = True
    seed: int | None = None

    def target_modules(self) -> list[str]:
        return (ATTENTION_MODULES if self.train_attn else []) + (MLP_MODULES if self.train_mlp else [])


@dataclass
class PassResult:
    outputs: list[dict[str, dict[str, Any]]]  # per datum: name → tensor as plain data
    metrics: dict[str, float]


@dataclass
class SamplerWeights:
    """The adapters a `save_weights_for_sampler` froze, with the optimizer steps they had seen."""

    version: int
    state: dict[str, torch.Tensor] = field(repr=False)
    serial: int = 0  # which weights these are, for the sampling copy (TinkerModel.weights_serial)


def tensor_of(value: Mapping[str, Any]) -> torch.Tensor:
    dtype = torch.int64 if value.get("dtype") == "int64" else torch.float32
    tensor = torch.tensor(value["data"], dtype=dtype)
    shape = value.get("shape")
    return tensor.reshape(shape) if shape else tensor


def plain(tensor: torch.Tensor) -> dict[str, Any]:
    integer = not tensor.is_floating_point()
    return {
        "data": tensor.flatten().tolist(),
        "dtype": "int64" if integer else "float32",
        "shape": list(tensor.shape),
    }


class TinkerModel:
    """A training client's state: `version` counts the optimizer steps taken."""

    def __init__(self, base_model: str, lora: LoraSpec, device: str = "auto") -> None:
        self.base_model = base_model
        self.device = resolve_device(device)
        if lora.seed is not None:
            torch.manual_seed(lora.seed)
        model = load_model(base_model, self.device)
        self.tokenizer = load_tokenizer(base_model)
        self.lora = lora
        self.model = apply_lora(
            model, {"r": lora.rank, "alpha": LORA_ALPHA, "target_modules": lora.target_modules()}
        )
        self.model.train()
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=1e-4)
        self.version = 0
        self.samplers: dict[str, SamplerWeights] = {}
        self._backend: Any = None
        # Every change of the policy's or a sampler's weights gets a new serial; the sampling copy (if any)
        # holds the weights of `_copy_holds` and is refilled when a sample needs others.
        self._serials = itertools.count(1)
        self.weights_serial = next(self._serials)
        self._copy_holds: object = None
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.tokenizer.eos_token_id or 0)

    # --- passes -------------------------------------------------------------------------------------

    def _batch(
        self, datums: Sequence[Mapping[str, Any]]
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Token ids (B, L) right-padded, the mask of real tokens and each loss input padded to (B, L)."""
        if not datums:
            raise LossInputError("No data: a forward_backward needs at least one datum.")
        rows = [list(d["tokens"]) for d in datums]
        width = max(len(r) for r in rows)
        if width == 0:
            raise LossInputError("A datum has no tokens.")
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width))
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1.0
        names = set().union(*(d.get("inputs", {}).keys() for d in datums))
        inputs: dict[str, torch.Tensor] = {}
        for name in names:
            padded = torch.zeros(
                (len(rows), width), dtype=torch.long if name == "target_tokens" else torch.float32
            )
            for i, datum in enumerate(datums):
                if name not in datum.get("inputs", {}):
                    raise LossInputError(f"Datum {i} lacks loss_fn_inputs[{name!r}] that others have.")
                value = tensor_of(datum["inputs"][name]).flatten()
                if value.numel() != len(rows[i]):
                    raise LossInputError(
                        f"Datum {i}: loss_fn_inputs[{name!r}] has {value.numel()} entries for {len(rows[i])} tokens."
                    )
                padded[i, : value.numel()] = value.to(padded.dtype)
            inputs[name] = padded
        if "target_tokens" not in inputs:
            raise LossInputError("Every datum needs loss_fn_inputs['target_tokens'].")
        return ids.to(self.device), mask.to(self.device), {k: v.to(self.device) for k, v in inputs.items()}

    def _logprobs(self, ids: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        decoder, head = _decoder_and_head(self.model)
        hidden = decoder(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        logp, _ = _token_logprobs(head, hidden, targets.clamp(min=0), 1.0, False)
        return logp * mask

    def forward_backward(
        self,
        datums: Sequence[Mapping[str, Any]],
        loss_fn: str,
        loss_fn_config: Mapping[str, float] | None = None,
        *,
        backward: bool = True,
    ) -> PassResult:
        started = time.perf_counter()
        ids, mask, inputs = self._batch(datums)
        with torch.enable_grad() if backward else torch.no_grad():
            logp = self._logprobs(ids, mask, inputs["target_tokens"])
            outcome = tinker_loss(loss_fn, logp, inputs, mask, loss_fn_config)
            if backward:
                outcome.loss.backward()
        lengths = [len(d["tokens"]) for d in datums]
        outputs = [
            {
                "logprobs": plain(logp[i, :n].detach().float().cpu()),
                "elementwise_loss": plain(outcome.elementwise[i, :n].float().cpu()),
            }
            for i, n in enumerate(lengths)
        ]
        loss_tokens = float(mask.sum())
        if "weights" in inputs:
            loss_tokens = float(((inputs["weights"] != 0).float() * mask).sum())
        elif "advantages" in inputs:
            loss_tokens = float(((inputs["advantages"] != 0).float() * mask).sum())
        metrics = service_pass_metrics(
            loss_sum=float(outcome.loss.detach()),
            loss_tokens=loss_tokens,
            tokens=sum(lengths),
            seconds=time.perf_counter() - started,
        )
        return PassResult(outputs=outputs, metrics={"loss:sum": float(outcome.loss.detach()), **metrics})

    def optim_step(self, adam: Mapping[str, Any]) -> dict[str, float]:
        """One AdamW step with the client's parameters (learning_rate, beta1, beta2, eps, weight_decay,
        grad_clip_norm: 0 means no clipping); the gradients are then zeroed."""
        started = time.perf_counter()
        lr = float(adam.get("learning_rate", 1e-4))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
            group["betas"] = (float(adam.get("beta1", 0.9)), float(adam.get("beta2", 0.95)))
            group["eps"] = float(adam.get("eps", 1e-12))
            group["weight_decay"] = float(adam.get("weight_decay", 0.0))
        params = [p for p in self.model.parameters() if p.requires_grad]
        clip = float(adam.get("grad_clip_norm", 0.0) or 0.0)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.version += 1
        self.weights_serial = next(self._serials)
        return service_step_metrics(
            grad_norm=float(grad_norm), learning_rate=lr, seconds=time.perf_counter() - started
        )

    # --- weights ------------------------------------------------------------------------------------

    def adapter_state(self) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        return {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.model).items()}

    def freeze_for_sampler(self, sampler_id: str) -> None:
        self.samplers[sampler_id] = SamplerWeights(
            self.version, self.adapter_state(), serial=self.weights_serial
        )

    def freeze_saved(self, sampler_id: str, path: Path) -> None:
        """The adapters of a checkpoint directory as sampler weights, the policy left as it is."""
        from peft import set_peft_model_state_dict

        current = self.adapter_state()
        checkpoint.load_weights(path, self.model)
        # version -1 is never the policy's: these adapters are always put in place to sample.
        self.samplers[sampler_id] = SamplerWeights(-1, self.adapter_state(), serial=next(self._serials))
        set_peft_model_state_dict(self.model, current)

    @contextmanager
    def sampler_weights(self, sampler_id: str | None) -> Iterator[None]:
        """The adapters `sampler_id` froze, put in place while it samples when the policy moved since;
        none at all for BASE_SAMPLER (the base model)."""
        if sampler_id == BASE_SAMPLER:
            with self.model.disable_adapter():
                yield
            return
        frozen = self.samplers.get(sampler_id) if sampler_id else None
        if frozen is None or frozen.version == self.version:
            yield
            return
        from peft import set_peft_model_state_dict

        current = self.adapter_state()
        set_peft_model_state_dict(self.model, frozen.state)
        try:
            yield
        finally:
            set_peft_model_state_dict(self.model, current)

    def save(self, path: Path, *, step: int, with_optimizer: bool) -> Path:
        """A checkpoint our runs can start from (adapters + merged weights + tokenizer), with the
        optimizer's state for `save_state`."""
        return checkpoint.save_checkpoint(
            path,
            model=self.model,
            tokenizer=self.tokenizer,
            optimizer=self.optimizer if with_optimizer else torch.optim.SGD([torch.zeros(1)], lr=0.0),
            scheduler=None,
            trainer_state={"step": step, "version": self.version, "optimizer": with_optimizer},
            run_config={"model": self.base_model, "lora": {"r": self.lora.rank, "alpha": LORA_ALPHA}},
        )

    def load(self, path: Path, *, with_optimizer: bool) -> None:
        checkpoint.load_weights(path, self.model)
        state = checkpoint.load_trainer_state(path)
        if with_optimizer and state.get("optimizer"):
            checkpoint.load_optimizer(path, self.optimizer, None)
        self.optimizer.zero_grad(set_to_none=True)
        self.weights_serial = next(self._serials)

    # --- sampling -----------------------------------------------------------------------------------

    def backend(self) -> Any:
        """The generation backend: on the policy itself, or on a plain copy in `lora_sampling_copy_dtype`
        (made at the first sample) that `sampling_weights` fills with merged weights."""
        if self._backend is None:
            from trainers.rollout.backends.transformers_backend import TransformersBackend

            dtype = lora_sampling_copy_dtype(self.device)
            if dtype is None:
                self._backend = TransformersBackend(
                    model=self.model,
                    tokenizer=self.tokenizer,
                    precision=policy_precision("auto", self.device),
                )
            else:
                copy = load_model(self.base_model, self.device, dtype).eval()
                for p in copy.parameters():
                    p.requires_grad_(False)
                self._backend = TransformersBackend(model=copy, tokenizer=self.tokenizer)
        return self._backend

    @property
    def samples_with_copy(self) -> bool:
        return self.backend().model is not self.model

    @contextmanager
    def sampling_weights(self, sampler_id: str | None) -> Iterator[None]:
        """Generation with `sampler_id`'s weights (`sampler_weights`): put in place on the policy, or merged
        into the sampling copy when it holds other weights (once per optimizer step or sampler)."""
        if not self.samples_with_copy:
            with self.sampler_weights(sampler_id):
                yield
            return
        frozen = self.samplers.get(sampler_id) if sampler_id else None
        if sampler_id == BASE_SAMPLER:
            wanted: object = BASE_SAMPLER
        elif frozen is None or frozen.version == self.version:
            wanted = self.weights_serial
        else:
            wanted = frozen.serial
        if wanted != self._copy_holds:
            with self.sampler_weights(sampler_id):
                merged = merged_state_dict(self.model)
            self._copy_holds = None  # not what it held if the push fails half-way
            self.backend().update_weights(merged)
            self._copy_holds = wanted
        yield

    def stop_strings(self, stop: Any) -> list[str] | None:
        if stop is None:
            return None
        if isinstance(stop, str):
            return [stop]
        return [self.tokenizer.decode([s]) if isinstance(s, int) else str(s) for s in stop]

    def sample(
        self, prompt: list[int], num_samples: int, params: Mapping[str, Any], sampler_id: str | None
    ) -> list[dict[str, Any]]:
        """`num_samples` completions of `prompt`: their tokens, log-probs and why each stopped."""
        temperature = float(params.get("temperature", 1.0))
        with self.sampling_weights(sampler_id), torch.no_grad():
            completions = self.backend().generate(
                [prompt],
                n=num_samples,
                max_new_tokens=int(params.get("max_tokens") or 64),
                temperature=temperature,
                top_p=float(params.get("top_p", 1.0)),
                stop=self.stop_strings(params.get("stop")),
                seed=params.get("seed"),
            )
        return [
            {
                "tokens": list(c.token_ids),
                "logprobs": list(c.logprobs or [0.0] * len(c.token_ids)),
                "stop_reason": "length" if c.finish_reason == "length" else "stop",
            }
            for c in completions
        ]

    def prompt_logprobs(self, prompt: list[int], sampler_id: str | None) -> list[float | None]:
        """log p(token i | tokens < i) of each prompt token; None for the first, which has no context."""
        if len(prompt) < 2:
            return [None] * len(prompt)
        ids = torch.tensor([prompt[:-1]], device=self.device)
        mask = torch.ones_like(ids, dtype=torch.float32)
        targets = torch.tensor([prompt[1:]], device=self.device)
        with self.sampler_weights(sampler_id), torch.no_grad():
            logp = self._logprobs(ids, mask, targets)[0].float().cpu().tolist()
        return [None, *logp]
