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
