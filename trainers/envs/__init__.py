"""Environments: the protocol and base classes (`base`), the built-in environments (a module each), their
tools (`tools`, the sandbox, MCP) and the kinds that name them (`kinds`: this package's own environments;
`ecosystem_kinds`: OpenEnv, verifiers, reasoning-gym, TextArena, agents, Harbor).

Importing the package loads the kinds' declarations only (data, no torch): the web process lists kinds
and validates configs with them; an environment's class is imported when its kind is built.
"""

from __future__ import annotations

from trainers.envs.ecosystem_kinds import (
    AGENT,
    HARBOR,
    OPENENV,
    REASONING_GYM,
    REASONING_GYM_DATASETS,
    TEXTARENA,
    TEXTARENA_GAMES,
    VERIFIERS,
)
from trainers.envs.kinds import (
    ARITHMETIC_CALCULATOR,
    ARITHMETIC_OPERATIONS,
    COUNTDOWN,
    FROM_DATASET,
    FROZEN_LAKE,
    MCP_SERVERS_SCHEMA,
    MCP_TOOLS,
    PYTHON_TASK_TYPES,
    PYTHON_TOOL,
)
from trainers.kinds import KindSpec

BUILTIN_ENVIRONMENTS: list[KindSpec] = [
    ARITHMETIC_CALCULATOR,
    COUNTDOWN,
    FROZEN_LAKE,
    PYTHON_TOOL,
    FROM_DATASET,
    MCP_TOOLS,
    OPENENV,
    VERIFIERS,
    REASONING_GYM,
    TEXTARENA,
    AGENT,
    HARBOR,
]

__all__ = [
    "ARITHMETIC_OPERATIONS",
    "BUILTIN_ENVIRONMENTS",
    "MCP_SERVERS_SCHEMA",
    "PYTHON_TASK_TYPES",
    "REASONING_GYM_DATASETS",
    "TEXTARENA_GAMES",
]
