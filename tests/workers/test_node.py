"""What a worker reports about its machine for the Workers page, measured for real on this one."""

from __future__ import annotations

import shutil

from workers.node import measure_usage


def test_a_worker_measures_its_cpu_and_memory_and_its_gpus_where_nvml_is_present():
    measure_usage()  # CPU use is measured between two calls
    usage = measure_usage()
    assert 0.0 <= usage["cpu_percent"] <= 100.0
    assert 0 < usage["memory_used_mb"] <= usage["memory_total_mb"]
    if not shutil.which("nvidia-smi"):
        assert usage["gpus"] == []  # no NVML here: nothing made up
    for gpu in usage["gpus"]:
        assert 0 <= gpu["utilization_percent"] <= 100 and gpu["memory_used_mb"] <= gpu["memory_total_mb"]


def test_the_heartbeat_file_is_touched_where_one_is_named(tmp_path, monkeypatch):
    import os
    import time

    from workers.node import touch_heartbeat_file

    beat = tmp_path / "worker-heartbeat"
    monkeypatch.delenv("WORKER_HEARTBEAT_FILE", raising=False)
    touch_heartbeat_file()
    assert not beat.exists()
    monkeypatch.setenv("WORKER_HEARTBEAT_FILE", str(beat))
    touch_heartbeat_file()
    os.utime(beat, (0, 0))
    touch_heartbeat_file()
    assert time.time() - beat.stat().st_mtime < 5


def test_a_local_ray_has_this_machines_cpus_and_the_gpus_it_may_see(monkeypatch):
    from workers.node import local_ray_resources

    gpus = [
        {"index": 0, "name": "H100", "memory_mb": 81559},
        {"index": 1, "name": "H100", "memory_mb": 81559},
    ]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert local_ray_resources([])["CPU"] >= 1 and "GPU" not in local_ray_resources([])
    assert local_ray_resources(gpus)["GPU"] == 2.0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert local_ray_resources(gpus)["GPU"] == 1.0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "GPU" not in local_ray_resources(gpus)


def test_an_unreachable_ray_cluster_is_unknown_not_an_error():
    from workers.node import probe_ray_cluster

    assert probe_ray_cluster("127.0.0.1:1", timeout_s=5) == {}


def test_a_ray_cluster_with_no_cpu_yet_is_still_forming_and_refuses_nothing():
    """Compose's Ray head declares no CPU and its nodes join after the workers start: a first measure of
    {GPU: 0, CPU: 0} must not refuse every run for a minute."""
    from workers.node import forming_is_unknown

    assert forming_is_unknown({"memory": 8e9, "object_store_memory": 2e9}) == {}
    assert forming_is_unknown({"CPU": 0.0, "GPU": 1.0}) == {}
    assert forming_is_unknown({"CPU": 4.0, "GPU": 1.0}) == {"CPU": 4.0, "GPU": 1.0}
