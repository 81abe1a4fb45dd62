"""Retake the README's screenshots on a real run: the demo project, a short GRPO run of the bundled model
on a real worker, real Chromium (tests/browser/test_screenshots.py does the work; the test suite skips
it). Writes docs/screenshot-live.png, -group.png, -tokens.png, -diff.png and -annotate.png.

    python scripts/screenshots.py            # 7 minutes on the 2-core CPU beside other jobs, 20–25 when it is busy
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    env = {**os.environ, "SCREENSHOTS": "1"}
    command = [sys.executable, "-m", "pytest", "tests/browser/test_screenshots.py", "-m", "screenshots", "-q"]
    return subprocess.call([*command, *sys.argv[1:]], cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
