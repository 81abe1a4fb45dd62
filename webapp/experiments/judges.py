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
        where = f"criteria.{index}.params"
        if judge_where(params) != "endpoint":
            model = str(params.get("model") or "policy")
            if model == "policy":
                continue
            choices = choices if choices is not None else judge_model_choices()
            if model not in choices:
                errors[f"{where}.model"] = [_unknown_model(model, choices)]
            continue
        secret_name = str(params.get("api_key_secret") or "")
        if secret_name and secret_name not in stored:
            known = ", ".join(sorted(stored)) or "none yet"
            errors[f"{where}.api_key_secret"] = [
                f"This project has no secret named {secret_name!r} (it has: {known}); add it on the "
                "project's Secrets page."
            ]
            continue
        if reach:
            key = ""
            if secret_name:
                from webapp.core.crypto import SecretUnreadable, decrypt

                try:
                    key = (secrets or {}).get(secret_name) or decrypt(stored[secret_name].ciphertext)
                except SecretUnreadable as exc:
                    errors[f"{where}.api_key_secret"] = [f"Secret {secret_name!r}: {exc}."]
                    continue
            problem = endpoint_problem(str(params["base_url"]).strip(), str(params.get("model") or ""), key)
            if problem:
                errors[f"{where}.base_url"] = [problem[0].upper() + problem[1:] + "."]
    return errors


def judge_launch_errors(*, project: Project, spec: Mapping[str, Any], reach: bool = True) -> list[str]:
    """`judge_errors` as the run form's rubric field shows them: "Criterion 2 · params.base_url: …"."""
    names = {f"criteria.{i}": name for i, name, _ in judge_params(spec)}
    lines = []
    for path, messages in judge_errors(project=project, spec=spec, reach=reach).items():
        row = ".".join(path.split(".")[:2])
        label = describe_path(path).replace(" · ", f" ({names.get(row, '')}) · ", 1)
        lines += [f"{label}: {message}" for message in messages]
    return lines
