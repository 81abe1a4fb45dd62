"""`pip install rollout-studio` is the SDK alone: a laptop that only streams a run to a dashboard gets the
client, the reporter and the wire format without torch or Django."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import sys
from trainers.sdk import Run, Studio, trajectory_item
from trainers.events import MemorySink
from trainers import wire
sink = MemorySink()
run = Run(1, "rsr_x", "http://127.0.0.1:9", sink=sink)
run.log_metrics(0, {"reward/mean": 0.5})
run.log_trajectories(0, [{"prompt": "2+2?", "completion": "4", "reward": 1.0}])
assert [e["type"] for e in sink.events] == ["metrics", "trajectories"], sink.events
heavy = sorted(m for m in ("torch", "django", "transformers", "numpy") if m in sys.modules)
print("heavy:", heavy)
"""


@pytest.mark.slow
def test_the_sdk_installs_and_reports_without_torch_or_django(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    installed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, timeout=120
    ).stdout.lower()
    assert "torch==" not in installed and "django==" not in installed
    done = subprocess.run(
        [str(python), "-c", SCRIPT], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "heavy: []"
