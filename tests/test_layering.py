"""The import direction (workers → webapp → trainers) and "one rule, one home", checked on the source."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def python_files(folder: str) -> list[Path]:
    return [p for p in (ROOT / folder).rglob("*.py") if "migrations" not in p.parts]


def imports_of(path: Path) -> set[str]:
    return set(re.findall(r"^\s*(?:from|import) ([\w.]+)", path.read_text(), re.M))


def test_the_web_app_never_imports_the_workers():
    offenders = [
        str(p.relative_to(ROOT))
        for p in python_files("webapp")
        if any(name == "workers" or name.startswith("workers.") for name in imports_of(p))
    ]
    assert offenders == []


def test_the_trainers_library_imports_neither_django_nor_the_web_app():
    forbidden = ("django", "webapp", "workers", "rest_framework", "channels", "celery")
    offenders = [
        str(p.relative_to(ROOT))
        for p in python_files("trainers")
        if any(name.split(".")[0] in forbidden for name in imports_of(p))
    ]
    assert offenders == []


def defined(pattern: str) -> list[str]:
    found = subprocess.run(
        ["git", "grep", "-n", "-E", pattern, "--", "*.py"], cwd=ROOT, capture_output=True, text=True
    )
    return [line for line in found.stdout.splitlines() if not line.startswith("tests/")]


def test_each_computed_rule_has_one_home():
    for rule in (
        r"^def group_stats\(",
        r"^def overlong_penalty\(",
        r"^def metric_series\(",
        r"^def broadcast_on_commit\(",
        r"def status_event\(",
        r"^def check_batch\(",
        r"^ZERO_VARIANCE_SPAN = ",
        r"^def access_run\(",
        r"^class Capability\(",
        r"^class Queue\(",
    ):
        assert len(defined(rule)) == 1, (rule, defined(rule))
    # The twins that used to disagree are gone.
    for twin in (
        r"def _sample_std\(",
        r"def _can\(",
        r"def queue_visible\(",
        r"def run_event\(",
        r"\"run\.event\"",
        r"def project_group\(",
    ):
        assert defined(twin) == [], twin


def trainers_imports(path: Path) -> set[str]:
    """The `trainers` modules a file imports, function-level imports included."""
    text = path.read_text()
    found = {m for m in re.findall(r"^\s*(?:from|import) (trainers[\w.]*)", text, re.M)}
    for package, names in re.findall(r"^\s*from (trainers[\w.]*) import \(?([\w, \n]+)\)?", text, re.M):
        found |= {f"{package}.{name.strip()}" for name in names.split(",") if name.strip()}
    return found


def package_of(module: str) -> str:
    """`trainers.sdk.wire` → `sdk`; `trainers.types` → `types`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_sdk_imports_no_other_part_of_the_trainers_library():
    # `pip install rollout-studio` ships the SDK without torch: every other package may build on it,
    # it builds on none of them.
    offenders = {
        str(p.relative_to(ROOT)): sorted(m for m in trainers_imports(p) if package_of(m) not in ("sdk", ""))
        for p in python_files("trainers/sdk")
    }
    assert {path: found for path, found in offenders.items() if found} == {}


def test_sampling_builds_on_nothing_that_builds_on_it():
    # rollout (the episode driver, backends, tool formats) is below environments, rubrics, the gateway,
    # the registry and the learner: they import it, never the reverse.
    allowed = {"rollout", "sdk", "types", "models", ""}
    offenders = {
        str(p.relative_to(ROOT)): sorted(m for m in trainers_imports(p) if package_of(m) not in allowed)
        for p in python_files("trainers/rollout")
    }
    assert {path: found for path, found in offenders.items() if found} == {}


def trainers_modules() -> dict[str, Path]:
    """Every module of the library by dotted name (a package by its `__init__`)."""
    found = {}
    for p in python_files("trainers"):
        parts = p.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return found


def trainers_module_graph() -> dict[str, dict[str, list[str]]]:
    """module → the library's modules it imports (at module level or inside a function; `from package
    import module` names the module, `from package import name` the package) → the importing file."""
    import ast

    modules = trainers_modules()

    def nearest(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, list[str]]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {nearest(a.name) for a in node.names if a.name.startswith("trainers")}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                if base == "trainers" or base.startswith("trainers."):
                    for alias in node.names:
                        full = f"{base}.{alias.name}"
                        targets.add(full if full in modules else nearest(base))
        for target in targets - {None, module}:
            graph.setdefault(module, {}).setdefault(str(target), []).append(str(path.relative_to(ROOT)))
    return graph


def test_no_import_cycle_inside_the_trainers_library():
    # A cycle makes "which module is lower" unanswerable: the error type of a tool in the MCP client's
    # module, the data types reaching up to the tool-call parser. Each module builds only on lower ones.
    graph = trainers_module_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def test_the_bottom_modules_build_on_the_sdk_alone():
    # The data types, the kinds' declarations and the model loader are what every package imports: they
    # import nothing of the library but the SDK (which imports nothing of it either).
    graph = trainers_module_graph()
    offenders = {
        module: sorted(
            t for t in graph.get(module, {}) if not (t == "trainers.sdk" or t.startswith("trainers.sdk."))
        )
        for module in ("trainers.types", "trainers.kinds", "trainers.models")
    }
    assert {m: found for m, found in offenders.items() if found} == {}


def test_the_parts_never_import_a_recipe():
    # trainers/recipes/ holds the entry points, each an algorithm composed of trainers/learn/'s parts: a
    # part that reached for a recipe would make the recipes' order matter (and one recipe import another).
    graph = trainers_module_graph()
    upward = {
        module: sorted(t for t in targets if t.startswith("trainers.recipes"))
        for module, targets in graph.items()
        if not module.startswith("trainers.recipes")
        and module
        not in ("trainers.cli", "trainers.kinds")  # the command line; run kinds name recipes by path
    }
    assert {m: found for m, found in upward.items() if found} == {}
    import trainers.recipes

    assert trainers.recipes.__doc__ == (
        "Entry points: each module is one algorithm read top to bottom (its parts live in trainers.learn)."
    )


def test_the_module_graph_sees_function_level_imports():
    graph = trainers_module_graph()
    assert "trainers.rollout.toolformats" in graph["trainers.learn.distributed"]  # inside a function
    assert "trainers.sdk.reasoning" in graph["trainers.types"]
    assert find_cycle({"a": {"b": ["x"]}, "b": {"a": ["y"]}}) == ["a", "b", "a"]


def test_the_old_module_paths_are_aliases_of_the_moved_modules():
    # Users' `from trainers.wire import …`, `from trainers.events import JsonlSink`, `trainers.trainer.train`
    # keep working (docs/api.md, "Old import paths"); nothing of ours uses them, and no file sits at an
    # old path (a file there would stop git from following the move when branches merge).
    import importlib.util

    import trainers

    for old, new in trainers.MOVED.items():
        assert importlib.util.find_spec(new) is not None, new
        if not new.startswith(("trainers.learn", "trainers.recipes")):  # (torch: its spec is enough)
            assert importlib.import_module(old) is importlib.import_module(new), old
        assert not (ROOT / (old.replace(".", "/") + ".py")).exists(), old
    uses = [
        f"{p.relative_to(ROOT)}: {m}"
        for folder in ("trainers", "webapp", "workers", "bench", "scripts")
        for p in python_files(folder)
        for m in trainers_imports(p)
        if m in trainers.MOVED
    ]
    assert uses == []


# --- the web app's sub-apps --------------------------------------------------------------------------
# A sub-app is two layers: its domain (models, services, selectors and the modules they use) and its
# pages (views, API endpoints, serializers, forms, consumers, template tags, management commands), which
# compose the domain of any sub-app below them. URLconfs only route: the root includes them by name and
# nothing imports one. The graph of (sub-app, layer) nodes, an edge per import — at module level or
# inside a function — has no cycle, and no domain module imports a page.

PAGE_MODULES = re.compile(
    r"^(views\w*|views\.\w+|apis|serializers|forms|schema_forms|consumers|admin|templatetags\.\w+|management\.\w+(\.\w+)?)$"
)
ROUTING_MODULES = re.compile(r"^(urls\w*|routing)$")


def webapp_modules() -> dict[str, Path]:
    found = {}
    for p in python_files("webapp"):
        parts = p.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = p
    return found


def layer_of(module: str) -> tuple[str, str] | None:
    """`webapp.rollouts.ingest` → ("rollouts", "domain"); None for the project's own modules (settings,
    the root URLconf, asgi) that are no sub-app's."""
    parts = module.split(".")
    if len(parts) < 3:
        return None
    app, rest = parts[1], ".".join(parts[2:])
    if ROUTING_MODULES.match(rest):
        return app, "routing"
    if app == "api" or PAGE_MODULES.match(rest):  # the API's shared parts serve endpoints only
        return app, "pages"
    return app, "domain"


def webapp_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The webapp modules a file imports (function-level imports included), `from x import module` too."""
    text = path.read_text()
    named = set(re.findall(r"^\s*(?:from|import) (webapp[\w.]*)", text, re.M))
    for package, names in re.findall(r"^\s*from (webapp[\w.]*) import \(?([\w, \n]+)\)?", text, re.M):
        named |= {f"{package}.{n.strip().split(' as ')[0]}" for n in names.split(",") if n.strip()}
    found = set()
    for name in named:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


def sub_app_graph() -> dict[tuple[str, str], dict[tuple[str, str], list[str]]]:
    """(app, layer) → (app, layer) it imports → the importing files."""
    modules = webapp_modules()
    graph: dict[tuple[str, str], dict[tuple[str, str], list[str]]] = {}
    for name, path in modules.items():
        source = layer_of(name)
        if source is None:
            continue
        for imported in webapp_imports(path, modules):
            target = layer_of(imported)
            if target is None or target == source:
                continue
            graph.setdefault(source, {}).setdefault(target, []).append(str(path.relative_to(ROOT)))
    return graph


def find_cycle(graph: dict) -> list | None:
    """One cycle of the graph as its nodes in order (first repeated at the end), or None."""
    state: dict = {}
    stack: list = []

    def visit(node) -> list | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def describe_cycle(graph: dict, cycle: list) -> str:
    steps = []
    for a, b in zip(cycle, cycle[1:], strict=False):
        steps.append(f"{a[0]} ({a[1]}) → {b[0]} ({b[1]}) in {', '.join(sorted(set(graph[a][b])))}")
    return "; ".join(steps)


def test_no_import_cycle_between_the_web_apps_sub_apps():
    graph = sub_app_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + describe_cycle(graph, cycle)


def test_the_cycle_finder_names_a_cycle():
    graph = {
        ("a", "domain"): {("b", "domain"): ["webapp/a/services.py"]},
        ("b", "domain"): {("a", "domain"): ["webapp/b/selectors.py"]},
    }
    cycle = find_cycle(graph)
    assert cycle == [("a", "domain"), ("b", "domain"), ("a", "domain")]
    assert "webapp/b/selectors.py" in describe_cycle(graph, cycle)
    assert find_cycle({("a", "pages"): {("a", "domain"): ["x"]}}) is None


def test_pages_sit_on_the_domain_and_nothing_imports_a_urlconf():
    graph = sub_app_graph()
    upward = {
        f"{source[0]} ({source[1]}) → {target[0]} ({target[1]})": files
        for source, targets in graph.items()
        for target, files in targets.items()
        if (source[1], target[1]) in {("domain", "pages"), ("domain", "routing"), ("pages", "routing")}
    }
    assert upward == {}
    # within one sub-app too: a service or selector never reaches for a form or a view
    modules = webapp_modules()
    inward = [
        f"{path.relative_to(ROOT)} → {imported}"
        for name, path in modules.items()
        if (layer := layer_of(name)) and layer[1] == "domain"
        for imported in webapp_imports(path, modules)
        if (other := layer_of(imported)) and other[0] == layer[0] and other[1] != "domain"
    ]
    assert inward == []


def test_a_selector_never_writes_through_a_service():
    offenders = [
        f"{p.relative_to(ROOT)}: {m}"
        for p in python_files("webapp")
        if p.name == "selectors.py"
        for m in webapp_imports(p, webapp_modules())
        if m.split(".")[-1] == "services" or ".services." in m or m.endswith(".services")
    ]
    assert offenders == []


# --- one formula per metric name -----------------------------------------------------------------------


def metric_names_written(source: str, names: set[str]) -> dict[str, set[str]]:
    """Which of `names` a module writes as metrics, each with the functions that write it: a dict literal
    with two or more of them as keys (not a rename table, whose values are all names), or an assignment
    `<something>metric<something>[name] = …`. An f-string counts by its literal tail
    (`f"{prefix}reward/std"` writes `reward/std`)."""
    import ast

    found: dict[str, set[str]] = {}

    def name_of(node: ast.AST | None) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[-1], ast.Constant):
            tail = node.values[-1].value
            return tail if isinstance(tail, str) and not tail.startswith("/") else None
        return None

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = f"{where}.{child.name}" if where else child.name
            written: list[str] = []
            if isinstance(child, ast.Dict):
                keys = [n for n in map(name_of, child.keys) if n in names]
                renames = all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in child.values)
                if len(keys) >= 2 and not renames:
                    written = keys
            elif isinstance(child, ast.Assign | ast.AugAssign):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                written = [
                    n
                    for t in targets
                    if isinstance(t, ast.Subscript)
                    and isinstance(t.value, ast.Name)
                    and "metric" in t.value.id
                    and (n := name_of(t.slice)) in names
                ]
            for name in written:
                found.setdefault(name, set()).add(inner or "<module>")
            visit(child, inner)

    visit(ast.parse(source), "")
    return found


def test_each_step_metric_has_one_formula():
    # The metrics our trainer and the importers of other trainers' runs report are computed by one
    # function each (trainers/learn/metrics.py: step_metrics, update_metrics); a dict or an assignment
    # writing one of those names anywhere else in the library is a second formula for it (reward/std was
    # the sample std in the trainer and the population std in the importers).
    from trainers.learn.metrics import StepSample, UpdateTotals, step_metrics, update_metrics

    sample = StepSample(
        reward=1.0,
        status="truncated",
        components=[{"name": "c", "raw": 1.0, "weighted": 1.0}],
        env_reward=1.0,
        completion_tokens=3,
        assistant_turns=1,
        tool_calls=0,
        correct=True,
        graded=True,
    )
    update = update_metrics(
        UpdateTotals(mismatch_tokens=1.0),
        epochs=1,
        trained_tokens=1,
        loss_tokens=1,
        trained_sequences=1,
        advantages=[0.0],
        staleness=[0],
        corrected=True,
    )
    shared = {n for n in [*step_metrics([[sample, sample]]), *update] if not n.startswith("criterion/")}
    assert {"reward/std", "zero_variance_fraction", "accuracy", "grad_norm", "is_weight/mean"} <= shared
    home = ROOT / "trainers" / "learn" / "metrics.py"
    elsewhere = {
        f"{p.relative_to(ROOT)}: {name}": sorted(where)
        for p in python_files("trainers")
        if p != home
        for name, where in metric_names_written(p.read_text(), shared).items()
    }
    assert elsewhere == {}


def test_the_metric_scan_finds_a_second_formula():
    source = (
        "RENAMES = {'kl': 'kl', 'entropy': 'entropy'}\n"
        "def importer_metrics(items, prefix):\n"
        '    metrics = {f"{prefix}reward/mean": 0.0, f"{prefix}reward/std": 0.0, "turns": []}\n'
        '    metrics[f"{prefix}zero_variance_fraction"] = 0.0\n'
        '    item = {"turns": [], "reward": 1.0}\n'
        "    return metrics\n"
    )
    names = {"reward/mean", "reward/std", "zero_variance_fraction", "kl", "entropy", "turns"}
    assert metric_names_written(source, names) == {
        "reward/mean": {"importer_metrics"},
        "reward/std": {"importer_metrics"},
        "turns": {"importer_metrics"},
        "zero_variance_fraction": {"importer_metrics"},
    }


# --- sizes that fit a head ------------------------------------------------------------------------------
# No product file over 650 lines, no function over 120. Today's exceptions are listed by name with their
# size: the list only shrinks (a listed file or function that now fits must leave it, and none may grow).

MAX_FILE_LINES = 650
MAX_FUNCTION_LINES = 120
FILES_OVER: dict[str, int] = {}
FUNCTIONS_OVER: dict[str, int] = {}


def product_files() -> list[Path]:
    found = [p for folder in ("webapp", "workers", "trainers") for p in python_files(folder)]
    return found + sorted((ROOT / "static" / "js").rglob("*.js"))


def function_sizes(path: Path) -> dict[str, int]:
    """`path:name` → lines of each function (methods and nested functions too, docstring included)."""
    import ast

    return {
        f"{path.relative_to(ROOT)}:{node.name}": node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None
    }


def test_no_product_file_is_longer_than_a_head_holds():
    over = {
        str(p.relative_to(ROOT)): n
        for p in product_files()
        if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    }
    grown = {name: n for name, n in over.items() if n > FILES_OVER.get(name, MAX_FILE_LINES)}
    assert grown == {}, f"over {MAX_FILE_LINES} lines (split the file; the listed ones only shrink)"
    fitting = sorted(set(FILES_OVER) - set(over))
    assert fitting == [], "these fit now: take them off FILES_OVER"


def test_no_function_is_longer_than_a_head_holds():
    over = {
        name: n
        for p in product_files()
        if p.suffix == ".py"
        for name, n in function_sizes(p).items()
        if n > MAX_FUNCTION_LINES
    }
    grown = {name: n for name, n in over.items() if n > FUNCTIONS_OVER.get(name, MAX_FUNCTION_LINES)}
    assert grown == {}, f"over {MAX_FUNCTION_LINES} lines (split the function; the listed ones only shrink)"
    fitting = sorted(set(FUNCTIONS_OVER) - set(over))
    assert fitting == [], "these fit now: take them off FUNCTIONS_OVER"
