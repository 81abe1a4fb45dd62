"""The suite's parallel processes keep apart (tests/parallel.py): each lane and each xdist worker its own var
dir and Redis database, so one process's Celery worker never takes another's runs."""

from __future__ import annotations

import os

import pytest

from tests.parallel import LANES, isolate, own_redis_url, slot


def test_each_process_gets_its_own_redis_database_and_the_first_keeps_the_urls():
    slots = {slot(lane, worker) for lane in (None, *LANES) for worker in (None, "gw0", "gw1", "gw2")}
    assert slot(None, None) == slot("heavy", None) == slot(None, "gw0") == 0
    assert len({slot(lane, worker) for lane in LANES for worker in ("gw0", "gw1")}) == 2 * len(LANES)
    assert max(slots) < 16
    assert own_redis_url("redis://127.0.0.1:6379/15", 0) == "redis://127.0.0.1:6379/15"
    assert own_redis_url("redis://127.0.0.1:6379/15", 1) == "redis://127.0.0.1:6379/14"
    assert own_redis_url("redis://:pw@redis:6379", 1) == "redis://:pw@redis:6379/15"  # db 0, wrapped
    assert (
        own_redis_url("rediss://cache:6380/3?ssl_cert_reqs=none", 2)
        == "rediss://cache:6380/1?ssl_cert_reqs=none"
    )
    assert own_redis_url("unix:///srv/var/redis.sock", 1) == "unix:///srv/var/redis.sock"


@pytest.mark.parametrize(
    "markers",
    [
        set(),
        {"slow"},
        {"browser"},
        {"bench"},
        {"bench", "bench_second"},
        {"slow", "browser"},
        {"bench", "slow"},
    ],
)
def test_every_test_runs_in_exactly_one_lane(markers):
    """A lane's marker expression (pytest's `-m`, plain Python booleans over the marker names) selects it."""
    names = {marker: marker in markers for marker in ("slow", "browser", "bench", "bench_second")}
    assert sum(bool(eval(expression, {}, names)) for expression in LANES.values()) == 1


def test_a_lanes_worker_keeps_its_state_under_its_own_var_dir():
    environ = {
        "ROLLOUT_STUDIO_TEST_LANE": "quick",
        "PYTEST_XDIST_WORKER": "gw1",
        "ROLLOUT_STUDIO_VAR": "var/test",
        "REDIS_URL": "redis://h:6379/15",
    }
    isolate(environ)
    assert environ["ROLLOUT_STUDIO_VAR"] == os.path.join("var/test", "quick", "gw1")
    assert environ["REDIS_URL"] == "redis://h:6379/11"  # the second lane, its worker gw1: slot 1 × 3 + 1


def test_one_plain_pytest_changes_nothing_and_an_unknown_lane_is_refused():
    environ = {"ROLLOUT_STUDIO_VAR": "var/test", "REDIS_URL": "redis://h:6379/15"}
    isolate(environ)
    assert environ == {"ROLLOUT_STUDIO_VAR": "var/test", "REDIS_URL": "redis://h:6379/15"}
    with pytest.raises(RuntimeError, match="the lanes are heavy, quick, browser, bench, bench_second"):
        isolate({"ROLLOUT_STUDIO_TEST_LANE": "fast"})


def test_this_session_runs_where_its_process_says(settings):
    """The settings this process read already name its own directory."""
    own = [os.environ.get(name) for name in ("ROLLOUT_STUDIO_TEST_LANE", "PYTEST_XDIST_WORKER")]
    if own[-1]:
        assert settings.VAR_DIR.name == own[-1]
    elif own[0]:
        assert settings.VAR_DIR.name == own[0]


def load_run_tests():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "run_tests", Path(__file__).resolve().parents[1] / "scripts" / "run_tests.py"
    )
    run_tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_tests)
    return run_tests


def test_each_lane_computes_on_one_thread_unless_told_otherwise(monkeypatch):
    run_tests = load_run_tests()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    environment = run_tests.lane_environment("heavy")
    assert environment["OMP_NUM_THREADS"] == environment["MKL_NUM_THREADS"] == "1"
    assert environment["ROLLOUT_STUDIO_TEST_LANE"] == "heavy"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert run_tests.lane_environment("quick")["OMP_NUM_THREADS"] == "2"


def test_the_lanes_write_bytecode_whatever_the_caller_said(monkeypatch):
    run_tests = load_run_tests()
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    for lane in ("heavy", "quick", "vllm"):
        assert "PYTHONDONTWRITEBYTECODE" not in run_tests.lane_environment(lane)


def test_the_vllm_tier_is_queued_last_when_its_venv_is_there(monkeypatch, tmp_path):
    run_tests = load_run_tests()
    venv_python = tmp_path / "python"
    monkeypatch.setattr(run_tests, "VLLM_PYTHON", venv_python)
    main_lanes = ["quick", "browser", "bench", "bench_second"]
    assert run_tests.queued_lanes([]) == main_lanes  # no .venv-vllm: the main venv's lanes only
    venv_python.touch()
    assert run_tests.queued_lanes(["-q", "--durations=80"]) == [*main_lanes, "vllm"]
    # Tests named by path: a subset of the main venv's tests, not the tier.
    assert run_tests.queued_lanes(["-q", "tests/test_parallel.py::test_slot"]) == main_lanes

    command = run_tests.lane_command("vllm", ["-q"])
    assert command[0] == str(venv_python) and command[-3:] == ["vllm", "-q", "tests/vllm"]
    monkeypatch.setenv("ROLLOUT_STUDIO_VAR", "var/test")
    environment = run_tests.lane_environment("vllm")
    assert environment["ROLLOUT_STUDIO_VAR"] == "var/test-vllm"  # as `make test-vllm`: its own state
    assert "ROLLOUT_STUDIO_TEST_LANE" not in environment  # not a lane tests/parallel.py knows
