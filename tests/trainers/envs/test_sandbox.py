"""The sandbox stops what untrusted code tries, reports it, and leaves the caller unharmed."""

import os
import subprocess
import time

import pytest

from trainers.envs.sandbox import _launch_plan, run_python


def test_it_runs_ordinary_code_with_stdin():
    result = run_python(
        "import math\nname = input()\nprint(f'hello {name}', math.factorial(10))", stdin="alice\n"
    )
    assert result.ok and result.stdout == "hello alice 3628800\n" and result.stderr == ""
    assert "rlimits" in result.isolation and "audit hook" in result.isolation


def test_the_program_works_inside_its_own_directory():
    result = run_python(
        "import os\nopen('notes.txt', 'w').write('x')\nprint(os.listdir('.'), os.environ['HOME'] == os.getcwd())"
    )
    assert result.ok and "notes.txt" in result.stdout and "True" in result.stdout


def test_errors_come_back_as_a_traceback():
    result = run_python("1 / 0")
    assert result.exit_code == 1 and result.killed_reason is None
    assert 'File "main.py", line 1' in result.stderr and "ZeroDivisionError" in result.stderr


def test_an_infinite_loop_hits_the_cpu_limit():
    started = time.monotonic()
    result = run_python("while True:\n    pass", cpu_s=1, timeout_s=10)
    assert result.killed_reason == "CPU time limit exceeded" and not result.timed_out
    assert time.monotonic() - started < 5


def test_a_sleeping_program_hits_the_wall_clock_timeout():
    result = run_python("import time\nprint('start', flush=True)\ntime.sleep(60)", timeout_s=1)
    assert result.timed_out and result.killed_reason == "wall-clock timeout (1 s)"
    assert result.stdout == "start\n" and result.duration_s < 5


def test_a_memory_bomb_hits_the_memory_limit():
    result = run_python("blocks = []\nwhile True:\n    blocks.append(bytearray(10**7))", memory_mb=128)
    assert result.killed_reason == "memory limit (128 MiB) exceeded"


def test_a_network_attempt_is_refused():
    code = "import urllib.request\nurllib.request.urlopen('http://1.1.1.1', timeout=2)"
    result = run_python(code)
    assert not result.ok and result.violations == ["importing socket is not allowed"]
    assert "refused by the sandbox" in result.killed_reason


def test_writing_outside_its_directory_is_refused(tmp_path):
    target = tmp_path / "escaped.txt"
    result = run_python(f"open({str(target)!r}, 'w').write('x')")
    assert not target.exists()
    assert result.violations and "outside the sandbox directory" in result.violations[0]
    for code in (
        "import os; os.remove('/etc/hostname')",
        "import shutil; shutil.rmtree('/tmp')",
        "open('../x', 'a')",
    ):
        assert run_python(code).violations, code


def test_reading_secrets_is_refused_but_the_stdlib_imports():
    assert run_python("print(open('/etc/passwd').read())").violations
    assert run_python("import os; print(os.listdir('/root'))").violations
    assert run_python("import json, fractions, statistics, decimal, collections, itertools, re; print(1)").ok


def test_a_fork_bomb_is_stopped():
    result = run_python("import os\nwhile True:\n    os.fork()")
    assert result.violations == ["os.fork is not allowed (no network, no processes)"]
    for code in (
        "import subprocess; subprocess.run(['sh', '-c', 'echo hi'])",
        "import os; os.system('echo hi')",
        "import ctypes",
    ):
        assert run_python(code).violations, code


def test_raising_its_own_limits_is_refused():
    result = run_python("import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))")
    assert result.violations


def test_output_is_capped():
    result = run_python("while True:\n    print('x' * 1000)", max_output_bytes=10_000)
    assert result.killed_reason == "output limit (10000 bytes) exceeded"
    assert len(result.stdout) <= 10_000


def test_the_network_namespace_holds_without_the_audit_hook():
    """Layer 2 alone: plain Python started the same way cannot reach the network."""
    prefix, python, layers = _launch_plan()
    if "network namespace" not in layers:
        pytest.skip("no network namespace on this machine")
    code = "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\nexcept OSError as e:\n    print('blocked', e.errno)"
    out = subprocess.run(
        [*prefix, python, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=20
    )
    assert out.stdout.startswith("blocked"), out


def test_the_process_limit_holds_without_the_audit_hook():
    """Layer 3+4 alone: as nobody with RLIMIT_NPROC, a real fork bomb dies and the caller is fine."""
    prefix, python, layers = _launch_plan()
    if "uid nobody" not in layers:
        pytest.skip("the sandbox cannot drop privileges on this machine")
    code = (
        "import os, resource\n"
        "resource.setrlimit(resource.RLIMIT_NPROC, (20, 20))\n"
        "made = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            os._exit(0)  # stays a zombie, still counted\n"
        "        made += 1\n"
        "except OSError:\n"
        "    print('stopped after', made)\n"
    )
    out = subprocess.run(
        [*prefix, python, "-I", "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,
    )
    assert out.stdout.startswith("stopped after"), out
    assert int(out.stdout.split()[-1]) <= 20
    assert os.getpid() > 0  # still here
