"""The image installs every extra a registered kind needs: each environment and criterion kind declares the
extra that brings what it imports (`KindSpec.extra`), and a cheap check on the Dockerfile's install lines
(the CPU and the GPU branch) holds them to it — a kind added with a new extra fails here rather than
inside a deployed worker. Docker-free: it reads the Dockerfile, pyproject.toml and the kinds' modules."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

from packaging.requirements import Requirement

from trainers.kinds import KindSpec
from trainers.registry import criterion_kinds, environment_kinds

ROOT = Path(__file__).resolve().parents[2]

# Every image runs the web app, the workers and the trainer (server + train): what a kind with no extra of
# its own relies on.
BASE_EXTRA = "all"
# Run kinds are not KindSpecs: the one with an extra of its own, and why.
RUN_KIND_EXTRAS = {"dpo": "dpo"}  # DPO runs train with TRL's DPOTrainer


def built_in_kinds() -> dict[str, KindSpec]:
    kinds = {**environment_kinds(), **criterion_kinds()}
    return {name: spec for name, spec in kinds.items() if spec.target.startswith("trainers.")}


def declared_extras() -> dict[str, set[str]]:
    """extra → the kinds that need it, as they declare it (plus the base every kind relies on)."""
    needed: dict[str, set[str]] = {BASE_EXTRA: {"every kind"}}
    for name, spec in built_in_kinds().items():
        if spec.extra:
            needed.setdefault(spec.extra, set()).add(name)
    for run_kind, extra in RUN_KIND_EXTRAS.items():
        needed.setdefault(extra, set()).add(f"{run_kind} runs")
    return needed


def install_lines() -> list[set[str]]:
    text = (ROOT / "Dockerfile").read_text()
    return [
        {extra for extra in extras.split(",") if not extra.startswith("$")}
        for extras in re.findall(r'pip install [^\n]*"\.\[([^\]]+)\]"', text)
    ]


def pyproject_extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_every_install_line_of_the_image_has_every_extra_a_kind_declares():
    lines = install_lines()
    assert len(lines) == 2, "one install line for the CPU image and one for the GPU image"
    needed = declared_extras()
    for extras in lines:
        missing = set(needed) - extras
        assert not missing, {extra: sorted(needed[extra]) for extra in missing}


def test_the_kinds_declare_extras_that_exist():
    unknown = {extra: kinds for extra, kinds in declared_extras().items() if extra not in pyproject_extras()}
    assert unknown == {}


# --- the declarations are right: a kind's modules import what its extra brings -------------------------


def distributions_of(extra: str) -> set[str]:
    """The distributions an extra names, its self-references (rollout-studio[server,train]) expanded."""
    names: set[str] = set()
    for line in pyproject_extras()[extra]:
        requirement = Requirement(line)
        if requirement.name == "rollout-studio":
            for inner in requirement.extras:
                names |= distributions_of(inner)
        else:
            names.add(normalize(requirement.name))
    return names


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# What every kind of a package builds on or may use: what they import is the business of the kinds that
# need it — the tool environments' optional `mcp_servers` need MCP (the envs extra) only when configured,
# and `mcp_tools`, which always does, declares it, so the image has it.
SHARED = {
    "trainers.envs": {"trainers.envs.base", "trainers.envs.mcp"},
    "trainers.rubrics": {"trainers.rubrics.base"},
}


@functools.cache
def distribution_providers() -> Mapping[str, list[str]]:
    """Import name → the installed distributions that provide it (one scan of site-packages)."""
    return importlib.metadata.packages_distributions()


def imported_distributions(
    module: str, package: str, *, with_base: bool, seen: set[str] | None = None
) -> set[str]:
    """The installed distributions a trainers module imports — function-level imports included — following
    the modules of its own package (`trainers.envs`, `trainers.rubrics`) it imports; the modules every kind
    of the package may use (`SHARED`) only `with_base`."""
    seen = set() if seen is None else seen
    if module in seen or (module in SHARED.get(package, {f"{package}.base"}) and not with_base):
        return set()
    seen.add(module)
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return set()
    providers = distribution_providers()
    found: set[str] = set()
    for node in ast.walk(ast.parse(Path(spec.origin).read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        for name in names:
            if name.startswith(package + "."):
                found |= imported_distributions(name, package, with_base=with_base, seen=seen)
            elif not name.startswith("trainers"):
                found |= {normalize(d) for d in providers.get(name.split(".")[0], [])}
    return found


def kind_imports(spec: KindSpec, *, with_base: bool) -> set[str]:
    """What a kind's modules import beyond every image's base install."""
    module = spec.target.partition(":")[0]
    package = ".".join(module.split(".")[:2])
    return imported_distributions(module, package, with_base=with_base) - distributions_of(BASE_EXTRA)


def test_a_kind_that_declares_an_extra_imports_something_it_brings():
    wrong = {
        name: f"declares {spec.extra!r} but imports none of {sorted(distributions_of(spec.extra))}"
        for name, spec in built_in_kinds().items()
        if spec.extra and not kind_imports(spec, with_base=True) & distributions_of(spec.extra)
    }
    assert wrong == {}


def test_a_kind_that_declares_no_extra_imports_nothing_beyond_the_base_install():
    # Its own modules, not what every kind of its package shares (`SHARED`).
    undeclared = {
        name: f"imports {sorted(found)}: declare the extra that brings them (`KindSpec.extra`)"
        for name, spec in built_in_kinds().items()
        if not spec.extra and (found := kind_imports(spec, with_base=False))
    }
    assert undeclared == {}


def test_the_dpo_extra_brings_trl():
    assert any(Requirement(dep).name == "trl" for dep in pyproject_extras()["dpo"])
