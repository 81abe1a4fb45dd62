"""Entry points: each module is one algorithm read top to bottom (its parts live in trainers.learn)."""
