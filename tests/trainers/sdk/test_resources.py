"""The process's peak memory as a run reports it (trainers.sdk.resources)."""

from __future__ import annotations

import sys

import pytest

from trainers.sdk.resources import peak_gpu_mb, peak_rss_mb, peaks, reset_peaks


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's high-water mark is Linux's")
def test_the_peak_follows_a_large_allocation_and_starts_afresh_when_reset():
    assert reset_peaks()
    before = peak_rss_mb()
    block = bytearray(300 * 2**20)  # zero-filled: every page touched
    assert peak_rss_mb() >= before + 250
    del block
    assert peak_rss_mb() >= before + 250  # a peak, not the current use
    assert reset_peaks()
    assert peak_rss_mb() < before + 250


def test_without_cuda_only_the_resident_peak_is_reported():
    assert peak_gpu_mb() is None or "torch" in sys.modules
    reported = peaks()
    assert reported["peak_rss_mb"] > 0 and set(reported) <= {"peak_rss_mb", "peak_gpu_mb"}
