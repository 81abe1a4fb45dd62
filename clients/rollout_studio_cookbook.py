"""tinker-cookbook's model table, extended with the models a Rollout Studio deployment serves.

The cookbook's recipes pick a chat renderer from the model's name (`model_info.get_model_attributes`),
and its table lists only the hosted service's models (Llama, Qwen, DeepSeek, …): an unmodified
`sl_loop` / `rl_loop` with `model_name=HuggingFaceTB/SmolLM2-135M-Instruct` would stop with "Unknown
model". This module adds this deployment's models to that table when the cookbook loads it — the recipe
files and the cookbook stay as published. `make venv-cookbook` installs it into .venv-cookbook with a
.pth file; in your own venv: `cp clients/rollout_studio_cookbook.py clients/rollout_studio_cookbook.pth
$(python -c 'import site; print(site.getsitepackages()[0])')`.

More models: TINKER_COOKBOOK_RENDERERS="org/name=renderer,…" (a renderer of `tinker_cookbook.renderers`,
e.g. role_colon, llama3, qwen3_instruct). Nothing here talks to a server or imports anything heavy: it
only waits for `tinker_cookbook.model_info` to be imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from typing import Any

# name → (organization, version, size, is_chat, recommended renderers). SmolLM2's own chat template is
# ChatML, which no cookbook renderer writes with SmolLM2's tokens; role_colon ("User: …\n\nAssistant:")
# is the plain-text renderer the cookbook uses for its base models.
SERVED_MODELS: dict[str, tuple[str, str, str, bool, tuple[str, ...]]] = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": ("HuggingFaceTB", "2", "135M", True, ("role_colon",)),
    "HuggingFaceTB/SmolLM2-360M-Instruct": ("HuggingFaceTB", "2", "360M", True, ("role_colon",)),
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": ("HuggingFaceTB", "2", "1.7B", True, ("role_colon",)),
}


def configured_models() -> dict[str, tuple[str, str, str, bool, tuple[str, ...]]]:
    models = dict(SERVED_MODELS)
    for pair in os.environ.get("TINKER_COOKBOOK_RENDERERS", "").split(","):
        name, _, renderer = pair.strip().partition("=")
        if name and renderer and "/" in name:
            models[name] = (name.split("/", 1)[0], "", "", True, (renderer.strip(),))
    return models


def extend(model_info: Any) -> None:
    """Wrap `get_model_attributes` so the served models resolve; every other name as before."""
    original = model_info.get_model_attributes

    def get_model_attributes(model_name: str) -> Any:
        known = configured_models().get(model_name.split(":", 1)[0])
        if known is None:
            return original(model_name)
        return model_info.ModelAttributes(*known)

    model_info.get_model_attributes = get_model_attributes


class _ModelInfoHook(importlib.abc.MetaPathFinder):
    """Extends tinker_cookbook.model_info right after it is first executed."""

    target = "tinker_cookbook.model_info"

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.target:
            return None
        sys.meta_path.remove(self)  # find the real module with the other finders
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module: Any) -> None:
            original_exec(module)
            extend(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    if "tinker_cookbook.model_info" in sys.modules:
        extend(sys.modules["tinker_cookbook.model_info"])
    elif not any(isinstance(f, _ModelInfoHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _ModelInfoHook())


install()
