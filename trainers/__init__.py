"""Rollout Studio's training library: no Django, no web app (docs/architecture.md, "The trainers library").

Packages, lowest first — each may import those above it, never one below:

- `sdk`: the wire format, event sinks, the HTTP reporter, the client (`pip install rollout-studio`)
- `types`, `texts`, `kinds`, `models`: the shared vocabulary (tasks, turns, trajectories, a
  trajectory as text, a kind's schema, loading a model and its precision)
- `rollout`: sampling episodes (backends, chat format, tool formats and calls)
- `envs`, `rubrics`, `gateway`: what an episode runs in and how it is scored
- `registry`, `config`: the kinds and a run's knobs, as the web app validates them
- `learn`: the trainer loop, losses, advantages, sharding, checkpoints, DPO, reward models
- `importers`, `integrations`, `cli`: other trainers' runs, the TRL callback, the command line

Old module paths of the SDK and the trainer entry point (`trainers.wire`, `trainers.events`,
`trainers.reporting`, `trainers.coercion`, `trainers.atif`, `trainers.trainer`) keep importing: they
are aliases of the modules that moved (the same module object, so a patch through either name is
seen by both), registered below rather than kept as files. docs/api.md lists them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

MOVED = {
    "trainers.wire": "trainers.sdk.wire",
    "trainers.events": "trainers.sdk.events",
    "trainers.reporting": "trainers.sdk.reporting",
    "trainers.coercion": "trainers.sdk.coercion",
    "trainers.atif": "trainers.sdk.atif",
    "trainers.trainer": "trainers.recipes.grpo",
    "trainers.learn.trainer": "trainers.recipes.grpo",
    "trainers.learn.dpo": "trainers.recipes.dpo",
}


class _MovedModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path in MOVED and answers with the module at its new one."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        # The module is already executed under its new name; importing it again would run it twice.
        pass


if not any(isinstance(finder, _MovedModule) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModule())
