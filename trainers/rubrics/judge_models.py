"""Where an `llm_judge` criterion's model runs, and the generation callables that reach it.

A criterion says it with its params (`trainers.rubrics.judge.judge_where`):

- `model: policy` — a frozen copy of the weights the run starts from (the run's `model` knob; the KL
  reference model when the run already holds one), loaded once per run;
- `model: <name>` — a model the workers serve: the bundled `smollm2-135m`, a Hugging Face id in the
  worker's cache, or a path the operator lists in `ROLLOUT_STUDIO_JUDGE_MODELS`; loaded once per run;
- `base_url` + `model` — an OpenAI-compatible endpoint (`POST {base_url}/chat/completions`), with the
  key taken from the project secret named by `api_key_secret` (the worker hands the trainer the value;
  a CLI run reads the environment variable of that name).

`JudgePool` builds the callables and holds the loaded models; `attach_judges(rubric, pool)` hands each
judge criterion its callable. `servable_models()` (no torch) lists what this machine can load — workers
report it, and the dashboard offers it as the judge's pick-list. `endpoint_problem()` is the launch check
of an endpoint: it answers in words what is wrong, or None.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainers.rubrics.judge import LLMJudge, judge_where

log = logging.getLogger(__name__)

# Models an operator lets judges load on this machine, beside the bundled ones and the Hugging Face cache:
# paths or ids separated by commas or new lines.
JUDGE_MODELS_ENV = "ROLLOUT_STUDIO_JUDGE_MODELS"
ENDPOINT_CHECK_TIMEOUT_S = 5.0
ENDPOINT_RETRIES = 2
ENDPOINT_CONCURRENCY = 8


class JudgeUnavailable(RuntimeError):
    """A judge the run cannot reach: a missing secret, a model that will not load, an endpoint that fails."""


# --- what a machine can serve (plain Python: the dashboard and the workers' heartbeats call it) -------


def _hub_cache() -> Path:
    root = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if root:
        return Path(root)
    home = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    return Path(home) / "hub"


def servable_models() -> list[str]:
    """Judge models this machine can load without a download: the bundled GGUFs whose package is
    installed, the chat models in the Hugging Face cache (`models--org--name` with a snapshot), and the
    operator's `ROLLOUT_STUDIO_JUDGE_MODELS`."""
    from trainers.models import BUNDLED_GGUF

    names = [name for name, (package, _) in BUNDLED_GGUF.items() if importlib.util.find_spec(package)]
    cache = _hub_cache()
    if cache.is_dir():
        for entry in sorted(cache.glob("models--*")):
            snapshots = entry / "snapshots"
            if snapshots.is_dir() and any(snapshots.glob("*/config.json")):
                names.append(entry.name[len("models--") :].replace("--", "/"))
    for item in os.environ.get(JUDGE_MODELS_ENV, "").replace("\n", ",").split(","):
        if item.strip():
            names.append(item.strip())
    return list(dict.fromkeys(names))


# --- endpoints ----------------------------------------------------------------------------------------


def _endpoint_request(url: str, *, api_key: str, body: Any = None, timeout: float) -> tuple[int, Any, str]:
    """(HTTP status, decoded JSON or None, text) of one call; a network failure raises OSError."""
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 — http(s) only (checked)
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text), text
    except ValueError:
        return status, None, text


def _error_text(payload: Any, text: str) -> str:
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        if isinstance(error, str):
            return error[:300]
    return " ".join(text.split())[:300]


def endpoint_problem(
    base_url: str, model: str, api_key: str = "", *, timeout: float = ENDPOINT_CHECK_TIMEOUT_S
) -> str | None:
    """What stops a judge from using `model` at `base_url`, in words (None: nothing). Asks the endpoint's
    `GET /models`: unreachable, refusing the key, or not listing the model is a problem; an endpoint
    without a model list (404) is taken at its word."""
    url = base_url.rstrip("/") + "/models"
    try:
        status, payload, text = _endpoint_request(url, api_key=api_key, timeout=timeout)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return f"cannot reach the judge endpoint {base_url}: {reason}"
    if status in (401, 403):
        return f"the judge endpoint {base_url} refused the key (HTTP {status}): {_error_text(payload, text)}"
    if status == 404:
        return None
    if status >= 400:
        return f"the judge endpoint {base_url} answered HTTP {status}: {_error_text(payload, text)}"
    served = [
        str(item.get("id"))
        for item in (payload.get("data") if isinstance(payload, dict) else None) or []
        if isinstance(item, dict) and item.get("id")
    ]
    if served and model not in served:
        return f"the judge endpoint {base_url} serves no model {model!r}; it serves: {', '.join(served[:20])}"
    return None


class EndpointJudge:
    """`generate(prompts)` over an OpenAI-compatible chat endpoint: each prompt one user message, sent
    concurrently; `last_usage` holds the tokens the endpoint reported for the last batch."""

    def __init__(
        self, base_url: str, model: str, api_key: str = "", *, max_tokens: int = 256, timeout_s: float = 60.0
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.base_url, self.model, self.api_key = base_url, model, api_key
        self.max_tokens, self.timeout_s = max_tokens, timeout_s
        self.last_usage: dict[str, int] = {}

    def _one(self, prompt: str) -> tuple[str, dict[str, int]]:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
        }
        problem = ""
        for attempt in range(ENDPOINT_RETRIES + 1):
            if attempt:
                time.sleep(0.5 * 2**attempt)
            try:
                status, payload, text = _endpoint_request(
                    self.url, api_key=self.api_key, body=body, timeout=self.timeout_s
                )
            except (OSError, ValueError) as exc:
                problem = f"cannot reach {self.url}: {getattr(exc, 'reason', None) or exc}"
                continue
            if status == 429 or status >= 500:
                problem = f"{self.url} answered HTTP {status}: {_error_text(payload, text)}"
                continue
            if status >= 400:
                raise JudgeUnavailable(f"{self.url} answered HTTP {status}: {_error_text(payload, text)}")
            try:
                reply = payload["choices"][0]["message"]["content"] or ""
            except (KeyError, IndexError, TypeError):
                raise JudgeUnavailable(f"{self.url} answered without a message: {text[:300]}") from None
            usage = payload.get("usage") or {}
            return str(reply), {
                "prompt_tokens": int(usage.get("prompt_tokens") or 0),
                "completion_tokens": int(usage.get("completion_tokens") or 0),
            }
        raise JudgeUnavailable(f"the judge endpoint failed after {ENDPOINT_RETRIES + 1} tries: {problem}")

    def __call__(self, prompts: list[str]) -> list[str]:
        workers = max(1, min(ENDPOINT_CONCURRENCY, len(prompts)))
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="judge") as pool:
            answers = list(pool.map(self._one, prompts))
        self.last_usage = {
            "prompt_tokens": sum(u["prompt_tokens"] for _, u in answers),
            "completion_tokens": sum(u["completion_tokens"] for _, u in answers),
        }
        return [reply for reply, _ in answers]


# --- models on the worker -----------------------------------------------------------------------------


class LocalJudge:
    """`generate(prompts)` over a generation backend: each prompt one user message in the model's chat
    template, the reply started with `reply_prefix` (returned as part of the reply), greedy decoding."""

    def __init__(self, backend: Any, *, max_new_tokens: int = 256, reply_prefix: str = "") -> None:
        self.backend, self.max_new_tokens, self.reply_prefix = backend, max_new_tokens, reply_prefix
        self.last_usage: dict[str, int] = {}

    def __call__(self, prompts: list[str]) -> list[str]:
        tokenizer = self.backend.tokenizer
        token_ids = []
        for prompt in prompts:
            chat = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            token_ids.append(tokenizer(chat + self.reply_prefix, add_special_tokens=False)["input_ids"])
        completions = self.backend.generate(token_ids, max_new_tokens=self.max_new_tokens, temperature=0.0)
        self.last_usage = {
            "prompt_tokens": sum(len(ids) for ids in token_ids),
            "completion_tokens": sum(len(c.token_ids) for c in completions),
        }
        return [self.reply_prefix + c.text for c in completions]


class JudgePool:
    """The judges of one run: builds each criterion's callable, loading a model on this worker at most once
    per run (two criteria on the same model share it), and releases them with `close()`.

    `policy_model`: the run's `model` knob; `reference`: an already frozen copy of it the run holds (its KL
    reference), reused instead of loading another; `secrets`: project secret values by name (None: read
    the environment variable of the secret's name, for runs started outside the dashboard)."""

    def __init__(
        self,
        *,
        policy_model: str,
        device: str = "cpu",
        secrets: Mapping[str, str] | None = None,
        reference: Any = None,
        tokenizer: Any = None,
        load_backend: Callable[[str], Any] | None = None,
    ) -> None:
        self.policy_model, self.device, self.secrets = policy_model, device, secrets
        self.reference, self.tokenizer = reference, tokenizer
        self._load_backend = load_backend
        self._backends: dict[str, Any] = {}

    def secret(self, name: str) -> str:
        if not name:
            return ""
        value = self.secrets.get(name) if self.secrets is not None else os.environ.get(name)
        if value is None:
            where = (
                "the worker was not given it"
                if self.secrets is not None
                else "no environment variable of that name"
            )
            raise JudgeUnavailable(f"the judge's API key secret {name!r} is missing: {where}")
        return value

    def backend(self, name: str) -> Any:
        """The generation backend of judge model `name` ("policy": the run's starting weights)."""
        if name not in self._backends:
            started = time.perf_counter()
            try:
                self._backends[name] = self._new_backend(name)
            except Exception as exc:
                raise JudgeUnavailable(
                    f"could not load the judge model {name!r}: {type(exc).__name__}: {exc}"
                ) from exc
            log.info("loaded judge model %s in %.1fs", name, time.perf_counter() - started)
        return self._backends[name]

    def _new_backend(self, name: str) -> Any:
        if self._load_backend is not None:
            return self._load_backend(name)
        from trainers.rollout.backends import make_backend

        if name == "policy":
            if self.reference is not None and self.tokenizer is not None:
                return make_backend("transformers", model=self.reference, tokenizer=self.tokenizer)
            name = self.policy_model
        return make_backend("transformers", model_name=name, device=self.device)

    def generate_for(self, criterion: LLMJudge) -> Callable[[list[str]], list[str]]:
        if criterion.where == "endpoint":
            return EndpointJudge(
                criterion.base_url,
                criterion.model,
                self.secret(criterion.api_key_secret),
                max_tokens=criterion.max_new_tokens,
                timeout_s=criterion.timeout_s,
            )
        key = "policy" if criterion.where == "policy" else criterion.model
        return LocalJudge(
            self.backend(key), max_new_tokens=criterion.max_new_tokens, reply_prefix=criterion.reply_prefix
        )

    def close(self) -> None:
        for backend in self._backends.values():
            try:
                backend.close()
            except Exception:  # noqa: BLE001 — releasing is best effort
                log.warning("closing a judge model failed", exc_info=True)
        self._backends.clear()
        self.reference = None


# The run-config knobs that name a project secret an LLM outside the rubric reads (its endpoint's key): the
# worker hands the trainer these too (workers.execution.judge_secrets).
SECRET_KNOBS = ("experience_api_key_secret", "curriculum_generator_api_key_secret")


def config_secret_names(config: Mapping[str, Any]) -> list[str]:
    """The project secrets a run config's own LLMs name (`SECRET_KNOBS`), beside its rubric's judges."""
    return sorted({str(config.get(knob) or "") for knob in SECRET_KNOBS} - {""})


def generation_model(
    pool: JudgePool,
    *,
    model: str,
    base_url: str = "",
    api_key_secret: str = "",
    max_tokens: int = 256,
    policy_backend: Any = None,
) -> Callable[[list[str]], list[str]]:
    """prompts → answers (with `last_usage`) of an LLM a run asks outside its rubric — Training-Free GRPO's
    experience model, the curriculum's task generator: `model` at an OpenAI-compatible `base_url` with the
    key from the project secret `api_key_secret`; else "policy" (`policy_backend` when given — the run's own
    sampling backend —, else a frozen copy of the starting weights) or a model the workers serve."""
    if base_url:
        return EndpointJudge(base_url, model, pool.secret(api_key_secret), max_tokens=max_tokens)
    if model == "policy" and policy_backend is not None:
        return LocalJudge(policy_backend, max_new_tokens=max_tokens)
    return LocalJudge(pool.backend(model), max_new_tokens=max_tokens)


def describe_model(model: str, base_url: str = "") -> str:
    """`generation_model`'s model in words, for a run's log."""
    if base_url:
        return f"{model} at {base_url}"
    return "the policy" if model == "policy" else model


def judge_criteria(rubric: Any) -> list[tuple[str, LLMJudge]]:
    """The rubric's LLM-judge criteria as (name, criterion)."""
    return [
        (b.name, b.criterion) for b in getattr(rubric, "criteria", []) if isinstance(b.criterion, LLMJudge)
    ]


def attach_judges(rubric: Any, pool: JudgePool) -> list[str]:
    """Give every judge criterion of `rubric` that has no callable yet the one `pool` makes for it; a line
    per judge saying where it runs (for the run's log)."""
    lines = []
    for name, criterion in judge_criteria(rubric):
        if criterion.generate is None:
            criterion.attach_models(generate=pool.generate_for(criterion))
        lines.append(f"LLM judge {name!r}: {describe_judge(criterion)}")
    return lines


def describe_judge(criterion: LLMJudge) -> str:
    where = criterion.where
    mode = "the whole group in one prompt" if criterion.mode == "group" else "one prompt per trajectory"
    if where == "endpoint":
        key = f", key from secret {criterion.api_key_secret}" if criterion.api_key_secret else ""
        return f"model {criterion.model} at {criterion.base_url}{key}; {mode}"
    if where == "policy":
        return f"a frozen copy of the run's starting weights; {mode}"
    return f"model {criterion.model} on the worker; {mode}"


def prefetch_judges(rubric: Any, groups: list[list[Any]]) -> None:
    """Ask every judge of `rubric` about all of `groups` (trajectories) in one batch each."""
    for _, criterion in judge_criteria(rubric):
        criterion.prefetch(groups)


def judge_usage_metrics(rubric: Any) -> dict[str, float]:
    """Each judge's cost since the last call, as step metrics `judge/<name>/{calls,tokens,seconds,…}`."""
    metrics: dict[str, float] = {}
    for name, criterion in judge_criteria(rubric):
        usage = criterion.take_usage()
        prefix = f"judge/{name}"
        metrics[f"{prefix}/calls"] = float(usage.calls)
        metrics[f"{prefix}/prompt_tokens"] = float(usage.prompt_tokens)
        metrics[f"{prefix}/completion_tokens"] = float(usage.completion_tokens)
        metrics[f"{prefix}/tokens"] = float(usage.prompt_tokens + usage.completion_tokens)
        metrics[f"{prefix}/seconds"] = usage.seconds
        metrics[f"{prefix}/cache_hits"] = float(usage.cache_hits)
    return metrics


def judge_params(spec: Mapping[str, Any]) -> list[tuple[int, str, dict[str, Any]]]:
    """The llm_judge criteria of a rubric spec as (index, name, params) — what the launch checks."""
    out = []
    for index, item in enumerate(spec.get("criteria") or []):
        if isinstance(item, Mapping) and item.get("kind") == "llm_judge":
            out.append((index, str(item.get("name") or ""), dict(item.get("params") or {})))
    return out


def secret_names(spec: Mapping[str, Any]) -> list[str]:
    """The project secrets a rubric's judges read (the worker hands the trainer only these)."""
    names = {
        str(p.get("api_key_secret") or "") for _, _, p in judge_params(spec) if judge_where(p) == "endpoint"
    }
    return sorted(n for n in names if n)
