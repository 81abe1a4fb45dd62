"""release_memory gives a finished run's freed heap back to the operating system."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from trainers.learn.memory import release_memory, resident_bytes


def test_it_reports_what_it_gave_back_and_never_a_negative_amount():
    assert resident_bytes() > 0
    assert release_memory() >= 0


def test_freed_tensor_memory_returns_to_the_os():
    # In a fresh interpreter: ~400 MB of small tensors, every other one kept alive so the heap cannot
    # shrink from its top by itself, then the rest freed — the fragmentation a training step leaves.
    script = textwrap.dedent("""
        import gc, torch
        from trainers.learn.memory import release_memory, resident_bytes
        tensors = [torch.ones(16_000) for _ in range(6_000)]
        keep = tensors[::50]
        del tensors; gc.collect()
        held = resident_bytes()
        given_back = release_memory()
        print(held, given_back, resident_bytes())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    held, given_back, after = map(int, out.split())
    assert given_back > 200 * 2**20 and after < held - 200 * 2**20
