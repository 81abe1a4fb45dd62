"""Can a rubric's LLM judges run? The checks a rubric save and a launch make before anything is queued.

A judge on the workers must name a model they serve (`judge_model_choices`: "policy" plus what the
workers report, `trainers.rubrics.judge_models.servable_models`); a judge on an endpoint must name a secret
of the project and, at launch, answer its `GET /models` with the model listed. Errors come back by the
criterion's field path (`criteria.<i>.params.model`), as the rubric builder shows them, and a launch
shows them on the run form's rubric field.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from django.apps import apps

from trainers.rubrics import describe_path
from trainers.rubrics.judge import judge_where
from trainers.rubrics.judge_models import endpoint_problem, judge_params, servable_models
from webapp.projects.models import Project, ProjectSecret


def judge_model_choices() -> list[str]:
    """What a judge's `model` may name when it runs on the workers: "policy" (the run's own starting
    weights), then the models the online workers report they can load — or, with no worker online (the
    embedded default starts them with the run), the models this machine can load."""
    # The fleet app sits above this one (it reaps runs), so its model is looked up, not imported.
    worker_node = apps.get_model("fleet", "WorkerNode")
    online = worker_node.objects.online().values_list("judge_models", flat=True)
    reported = sorted({name for models in online for name in (models or [])})
    return ["policy", *(reported or servable_models())]


def _unknown_model(model: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(model, choices, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"No worker serves a judge model {model!r}.{hint} Valid names: {', '.join(choices)}."


def model_problems(
    *,
    model: str,
    base_url: str,
    api_key_secret: str,
    stored: Mapping[str, ProjectSecret],
    reach: bool,
    secrets: Mapping[str, str] | None = None,
    choices: list[str] | None = None,
) -> dict[str, str]:
    """What stops a model a run asks — a judge's, or one its knobs name (the curriculum's generator) — by the
    part at fault ("model" | "api_key_secret" | "base_url"): on the workers it must be one they serve (or
    "policy"); at an endpoint it needs a secret of the project and, with `reach`, an endpoint that answers."""
    if not base_url:
        if model == "policy":
            return {}
        choices = choices if choices is not None else judge_model_choices()
        return {} if model in choices else {"model": _unknown_model(model, choices)}
    if api_key_secret and api_key_secret not in stored:
        known = ", ".join(sorted(stored)) or "none yet"
        return {
            "api_key_secret": f"This project has no secret named {api_key_secret!r} (it has: {known}); add it "
            "on the project's Secrets page."
        }
    if not reach:
        return {}
    key = ""
    if api_key_secret:
        from webapp.core.crypto import SecretUnreadable, decrypt

        try:
            key = (secrets or {}).get(api_key_secret) or decrypt(stored[api_key_secret].ciphertext)
        except SecretUnreadable as exc:
            return {"api_key_secret": f"Secret {api_key_secret!r}: {exc}."}
    problem = endpoint_problem(base_url, model, key)
    return {"base_url": problem[0].upper() + problem[1:] + "."} if problem else {}


def judge_errors(
    *,
    project: Project,
    spec: Mapping[str, Any],
    reach: bool = False,
    secrets: Mapping[str, str] | None = None,
) -> dict[str, list[str]]:
    """What stops the rubric's judges, by field path ({} when nothing). `reach`: also ask each endpoint
    (a launch does; a rubric save does not — the endpoint may come up later)."""
    judges = judge_params(spec)
    if not judges:
        return {}
    errors: dict[str, list[str]] = {}
    choices: list[str] | None = None
    stored = {secret.name: secret for secret in ProjectSecret.objects.filter(project=project)}
    for index, _name, params in judges:
        on_endpoint = judge_where(params) == "endpoint"
        if not on_endpoint and str(params.get("model") or "policy") != "policy":
            choices = choices if choices is not None else judge_model_choices()
        problems = model_problems(
            model=str(params.get("model") or ("" if on_endpoint else "policy")),
            base_url=str(params.get("base_url") or "").strip() if on_endpoint else "",
            api_key_secret=str(params.get("api_key_secret") or ""),
            stored=stored,
            reach=reach,
            secrets=secrets,
            choices=choices,
        )
        errors.update({f"criteria.{index}.params.{part}": [m] for part, m in problems.items()})
    return errors


def generator_errors(
    *, project: Project, knobs: Mapping[str, Any], reach: bool = True
) -> dict[str, list[str]]:
    """What stops the curriculum's LLM generator (`curriculum_generator_*` knobs), by knob ({} when it is
    not used or can run): the launch refuses a model no worker serves, a missing secret, an endpoint down."""
    from trainers.learn.curriculum import generator_of

    if knobs.get("curriculum") != "from_failures" or generator_of(dict(knobs)) != "llm":
        return {}
    problems = model_problems(
        model=str(knobs.get("curriculum_generator_model") or "").strip(),
        base_url=str(knobs.get("curriculum_generator_base_url") or "").strip(),
        api_key_secret=str(knobs.get("curriculum_generator_api_key_secret") or ""),
        stored={secret.name: secret for secret in ProjectSecret.objects.filter(project=project)},
        reach=reach,
    )
    # The run form shows a knob's errors under "config.<knob>" (run_config_errors).
    return {f"config.curriculum_generator_{part}": [m] for part, m in problems.items()}


def judge_launch_errors(*, project: Project, spec: Mapping[str, Any], reach: bool = True) -> list[str]:
    """`judge_errors` as the run form's rubric field shows them: "Criterion 2 · params.base_url: …"."""
    names = {f"criteria.{i}": name for i, name, _ in judge_params(spec)}
    lines = []
    for path, messages in judge_errors(project=project, spec=spec, reach=reach).items():
        row = ".".join(path.split(".")[:2])
        label = describe_path(path).replace(" · ", f" ({names.get(row, '')}) · ", 1)
        lines += [f"{label}: {message}" for message in messages]
    return lines
