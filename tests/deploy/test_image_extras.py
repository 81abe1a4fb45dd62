"""The image installs every extra a registered kind needs: a cheap check on the Dockerfile's install lines
(the CPU and the GPU branch), so that a kind added with a new extra fails here rather than inside a
deployed worker."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What each family of kinds imports at run time, and the extra that brings it.
NEEDED = {
    "all": "the web app, workers, the trainer (server + train)",
    "envs": "ecosystem environments: openenv, verifiers, reasoning-gym, textarena, math-verify, MCP",
    "agents": "the agent kind's OpenAI client",
    "dpo": "DPO runs (TRL's DPOTrainer)",
}


def install_lines() -> list[set[str]]:
    text = (ROOT / "Dockerfile").read_text()
    return [set(extras.split(",")) for extras in re.findall(r'pip install [^\n]*"\.\[([^\]]+)\]"', text)]


def test_every_install_line_of_the_image_has_every_extra_a_kind_needs():
    lines = install_lines()
    assert len(lines) == 2, "one install line for the CPU image and one for the GPU image"
    for extras in lines:
        missing = set(NEEDED) - extras
        assert not missing, {name: NEEDED[name] for name in missing}


def test_the_extras_named_exist_and_bring_what_the_kinds_import():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(NEEDED) <= set(extras)
    assert any(dep.startswith("trl") for dep in extras["dpo"])
    assert any(dep.startswith("openai") for dep in extras["agents"])
    assert any(dep.startswith("openenv-core") for dep in extras["envs"])
