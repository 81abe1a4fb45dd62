"""oneDNN-packed weights for the linear layers of a bf16 model that only samples, on a CPU.

A bf16 matrix product on a CPU goes through oneDNN, which first reorders the weight into the blocked
layout its AMX / AVX512-BF16 kernel reads, and does that again on every call. While decoding, a call
multiplies a handful of rows by the whole weight, so the reorder costs about as much as the product:
SmolLM2-135M's 1,536 × 576 MLP weight against 8 rows took 190 µs a call, 105 µs with the weight
reordered once (`torch.ops.mkldnn._reorder_linear_weight`, what PyTorch's inductor does for frozen CPU
models) — the same kernel, the same numbers to the bit (`tests/trainers/rollout/test_packed_linear.py`).
The bench's group of 8 × 32 tokens decoded in 1.21 s instead of 1.63 s.

Only for a model that never trains and whose weights change only through `TransformersBackend`
(`update_weights`, `release_weights`). A layer whose weight no other module uses holds the packed copy
instead of its plain weight (which is released); a weight shared with another module (an LM head tied to
the embeddings, which look rows up) stays and is packed beside it: 56 MB more for the 135M model, whose
demo run peaked at 2.52 GiB instead of 2.48 (2.74 GiB with every plain weight kept)."""

from __future__ import annotations

import functools
from typing import Any

import torch

# The number of rows the packed layout is tuned for: a decode step's (a group, a few groups).
DECODE_ROWS = 16


def can_pack(model: Any) -> bool:
    """Whether `model`'s linear layers can run on packed weights: a CPU model held in bf16 that does not
    train, where PyTorch's oneDNN has bf16 kernels for this CPU."""
    params = list(model.parameters())
    return (
        bool(params)
        and all(p.device.type == "cpu" and p.dtype == torch.bfloat16 for p in params)
        and not any(p.requires_grad for p in params)
        and torch.backends.mkldnn.is_available()
        and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    )


def _packed_forward(module: torch.nn.Linear, packed: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, module.bias, "none", [], "")


class PackedLinears:
    """The linear layers of one model (`can_pack`) on packed weights. `owned`: the state-dict keys of the
    weights held packed only (their parameters are empty)."""

    def __init__(self, model: Any) -> None:
        linears = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        elsewhere = {
            id(p)
            for module in model.modules()
            if not isinstance(module, torch.nn.Linear)
            for p in module.parameters(recurse=False)
        }
        self.layers = list(linears.values())
        self.owned = {f"{name}.weight": m for name, m in linears.items() if id(m.weight) not in elsewhere}
        # Packed beside their plain weight, which another module also uses.
        self.shared = [m for m in self.layers if id(m.weight) in elsewhere]
        self.shapes = {key: layer.weight.shape for key, layer in self.owned.items()}
        self._packed: dict[int, torch.Tensor] = {}  # id(layer) → its packed weight

    def pack(self) -> None:
        """Pack every layer's plain weight (at the start); then release the owned ones."""
        for layer in self.layers:
            self._pack(layer, layer.weight)
        for layer in self.owned.values():
            layer.weight.data = torch.empty(0, dtype=layer.weight.dtype, device=layer.weight.device)

    def load(self, key: str, value: torch.Tensor) -> bool:
        """Pack `value` as the owned weight `key` (never held plain); False when `key` is not owned."""
        layer = self.owned.get(key)
        if layer is None:
            return False
        if value.shape != self.shapes[key]:  # what copy_ into the plain weight would have refused
            raise ValueError(f"{key}: a weight of shape {tuple(value.shape)} for {tuple(self.shapes[key])}")
        self._pack(layer, value.to(torch.bfloat16))
        return True

    def pack_shared(self) -> None:
        """Pack again the shared weights, after they changed in place."""
        for layer in self.shared:
            self._pack(layer, layer.weight)

    def drop(self) -> None:
        """Let go of every packed weight (the owned ones with them: only a full weight push brings them
        back) and give the layers their own forward again."""
        for layer in self.layers:
            if self._packed.pop(id(layer), None) is not None:
                del layer.forward

    def complete(self) -> bool:
        """Whether every layer runs on a packed weight."""
        return len(self._packed) == len(self.layers)

    def dense(self, key: str) -> torch.Tensor:
        """The owned weight `key` as a plain tensor (a copy unpacked from the packed one)."""
        return self._packed[id(self.owned[key])].to_dense()

    def _pack(self, layer: torch.nn.Linear, weight: torch.Tensor) -> None:
        with torch.no_grad():
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), DECODE_ROWS)
        self._packed[id(layer)] = packed
        layer.forward = functools.partial(_packed_forward, layer, packed)  # type: ignore[method-assign]
