"""`python -m trainers …` (and the `rollout-trainers` script): see trainers.cli."""

from __future__ import annotations

import sys

from trainers.cli import main

if __name__ == "__main__":
    sys.exit(main())
