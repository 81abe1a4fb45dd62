"""Run untrusted Python (code a model wrote) in a locked-down subprocess.

Layers, each enough to stop the common case on its own, used together where the machine allows:

1. A fresh temporary directory as cwd, HOME and TMPDIR; `python -I -S -B` (isolated: no environment
   variables, no site-packages, no user site, no .pyc writes).
2. No network: the child runs in its own network namespace (`unshare --net`, as root; or
   `unshare --user --map-root-user --net` where unprivileged user namespaces are enabled), so it
   has only a downed loopback interface.
3. As root, the child drops to uid/gid 65534 (nobody) with `setpriv`, so it cannot raise its own
   limits and can write nowhere the temp directory's owner could not.
4. Resource limits set by the child on itself before any user code runs: RLIMIT_CPU, RLIMIT_AS,
   RLIMIT_NOFILE, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_CORE. (Set inside the child rather than in a
   `preexec_fn`, which is unsafe in a multi-threaded parent such as the trainer with its reporter
   thread.)
5. An audit hook (PEP 578) installed before user code that refuses: sockets; fork / exec /
   subprocess / os.system; ctypes and _posixsubprocess imports; raising resource limits; writing,
   deleting or renaming anything outside the temp directory; reading anything outside it except
   the Python standard library. Refusals raise PermissionError("sandbox: …") in the child and are
   reported back in `SandboxResult.violations`.
6. The parent enforces a wall-clock timeout and an output cap, and kills the whole process group.

The layers the current machine provides are listed in `SandboxResult.isolation`.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import cache

NOBODY = 65534

# Runs inside the child before the user's code. It is our code; the user's code is only ever read
# from main.py and executed after the limits and the audit hook are in place.
_BOOTSTRAP = r"""
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
for name, value in cfg["limits"].items():
    resource.setrlimit(getattr(resource, name), tuple(value))
ROOT = os.path.realpath(os.getcwd())
READABLE = [ROOT] + [os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)]
READABLE.append(os.path.realpath(os.path.dirname(os.__file__)))
DEVICES = {"/dev/null", "/dev/urandom", "/dev/random", "/dev/zero"}
REPORT_FD = cfg["report_fd"]
with open("main.py", encoding="utf-8") as f:
    SOURCE = f.read()
BLOCKED_IMPORTS = {"ctypes", "_ctypes", "_posixsubprocess", "_socket", "socket", "ssl", "_ssl", "mmap", "_multiprocessing"}
BLOCKED_EVENTS = ("socket.", "subprocess.", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
                  "os.forkpty", "os.kill", "os.killpg", "pty.", "ctypes.", "resource.setrlimit", "resource.prlimit",
                  "os.setuid", "os.setgid", "os.chroot", "sys._debugmallocstats", "winreg.", "_winapi.", "webbrowser.")
MUTATING = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link", "os.symlink",
            "os.truncate", "os.utime", "os.chflags", "os.lchflags", "os.mkfifo", "os.mknod", "shutil.", "os.chdir")
LISTING = ("os.listdir", "os.scandir", "glob.glob", "os.walk")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

def _inside(path, roots):
    if isinstance(path, int):
        return True
    try:
        real = os.path.realpath(os.path.join(ROOT, os.fsdecode(path)))
    except (TypeError, ValueError):
        return False
    return any(real == r or real.startswith(r + os.sep) for r in roots)

def _deny(message):
    try:
        os.write(REPORT_FD, (message.replace("\n", " ") + "\n").encode())
    except OSError:
        pass
    raise PermissionError("sandbox: " + message)

def _hook(event, args):
    if event == "open":
        path, mode, flags = (list(args) + [None, None, None])[:3]
        if isinstance(path, int):
            return
        writing = bool(mode and any(c in mode for c in "wax+")) or bool((flags or 0) & WRITE_FLAGS)
        if writing:
            if not _inside(path, [ROOT]):
                _deny(f"writing {os.fsdecode(path)!r} outside the sandbox directory is not allowed")
        elif not _inside(path, READABLE) and os.fsdecode(path) not in DEVICES:
            _deny(f"reading {os.fsdecode(path)!r} outside the sandbox directory is not allowed")
    elif event == "import":
        if args[0] in BLOCKED_IMPORTS or args[0].split(".")[0] in BLOCKED_IMPORTS:
            _deny(f"importing {args[0]} is not allowed")
    elif event.startswith(BLOCKED_EVENTS):
        _deny(f"{event} is not allowed (no network, no processes)")
    elif event.startswith(MUTATING):
        for arg in args:
            if isinstance(arg, (str, bytes, os.PathLike)) and not _inside(arg, [ROOT]):
                _deny(f"{event} on {os.fsdecode(arg)!r} outside the sandbox directory is not allowed")
    elif event.startswith(LISTING):
        for arg in args[:1]:
            if isinstance(arg, (str, bytes, os.PathLike)) and not _inside(arg, READABLE):
                _deny(f"{event} of {os.fsdecode(arg)!r} is not allowed")

import traceback
sys.addaudithook(_hook)
del json, resource
try:
    exec(compile(SOURCE, "main.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
except SystemExit:
    raise
except BaseException as exc:
    # Show the user's frames (and library frames), not this bootstrap's or the hook's.
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != "<string>"]
    sys.stderr.write("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)))
    sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
    raise SystemExit(1)
"""


@dataclass
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None  # negative: killed by that signal
    timed_out: bool
    killed_reason: str | None  # why the sandbox stopped it, in words (None: it ended on its own)
    violations: list[str] = field(default_factory=list)  # actions the audit hook refused
    duration_s: float = 0.0
    isolation: list[str] = field(default_factory=list)  # the layers in force on this machine

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed_reason is None


def _world_accessible(path: str) -> bool:
    """Whether an unprivileged user can reach and run `path` (every parent directory searchable)."""
    current = os.path.realpath(path)
    if not os.stat(current).st_mode & 0o001:
        return False
    while current != os.path.dirname(current):
        current = os.path.dirname(current)
        if not os.stat(current).st_mode & 0o001:
            return False
    return True


def _interpreter_candidates(unprivileged: bool) -> list[str]:
    found: list[str] = []
    for path in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        real = os.path.realpath(path)
        if os.path.exists(real) and real not in found and (not unprivileged or _world_accessible(real)):
            found.append(real)
    return found


def _probe(command: list[str]) -> bool:
    try:
        done = subprocess.run(command, capture_output=True, timeout=20, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and done.stdout.strip() == b"ok"


@cache
def _launch_plan() -> tuple[tuple[str, ...], str, tuple[str, ...]]:
    """(wrapper argv prefix, python interpreter, isolation layers) that work on this machine; cached."""
    wrappers: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    drop = (
        (setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--no-new-privs", "--")
        if setpriv
        else ()
    )
    if os.geteuid() == 0:
        if unshare and drop:
            wrappers.append(((unshare, "--net", "--", *drop), ("network namespace", "uid nobody")))
        if unshare:
            wrappers.append(((unshare, "--net", "--"), ("network namespace",)))
        if drop:
            wrappers.append((drop, ("uid nobody",)))
    elif unshare:
        wrappers.append(((unshare, "--user", "--map-root-user", "--net", "--"), ("network namespace",)))
    wrappers.append(((), ()))
    check = "import math, json, fractions, itertools; print('ok')"
    for prefix, layers in wrappers:
        for python in _interpreter_candidates(unprivileged="uid nobody" in layers):
            if _probe([*prefix, python, "-I", "-S", "-B", "-c", check]):
                return prefix, python, (*layers, "rlimits", "audit hook")
    raise RuntimeError("No Python interpreter can be started for the sandbox.")


def _user_process_count(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as status:
                    for line in status:
                        if line.startswith("Uid:"):
                            count += int(line.split()[1]) == uid
                            break
            except OSError:
                continue
    return count


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), lambda: proc.kill()):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            continue


def run_python(
    code: str,
    *,
    timeout_s: float = 5,
    cpu_s: int = 5,
    memory_mb: int = 256,
    stdin: str = "",
    max_output_bytes: int = 64 * 1024,
    max_file_mb: int = 16,
) -> SandboxResult:
    """Run `code` as a Python program in the sandbox and report what happened. Never raises on bad code."""
    prefix, python, layers = _launch_plan()
    drops_privileges = "uid nobody" in layers
    workdir = tempfile.mkdtemp(prefix="rs-sandbox-")
    report_read, report_write = os.pipe()
    started = time.monotonic()
    try:
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as source:
            source.write(code)
        if drops_privileges:
            os.chown(workdir, NOBODY, NOBODY)
            os.chown(os.path.join(workdir, "main.py"), NOBODY, NOBODY)
        # RLIMIT_NPROC counts every process of the user: as nobody a small number suffices; as an
        # ordinary user it must leave room for the user's existing processes.
        nproc = 64 if drops_privileges else _user_process_count(os.geteuid()) + 16
        limits = {
            "RLIMIT_CPU": [cpu_s, cpu_s + 1],
            "RLIMIT_AS": [memory_mb * 1024 * 1024] * 2,
            "RLIMIT_NOFILE": [64, 64],
            "RLIMIT_FSIZE": [max_file_mb * 1024 * 1024] * 2,
            "RLIMIT_NPROC": [nproc, nproc],
            "RLIMIT_CORE": [0, 0],
        }
        config = json.dumps({"limits": limits, "report_fd": report_write})
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }
        proc = subprocess.Popen(
            [*prefix, python, "-I", "-S", "-B", "-c", _BOOTSTRAP, config],
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(report_write,),
            start_new_session=True,
        )
        os.close(report_write)
        report_write = -1
        return _supervise(
            proc, report_read, stdin, timeout_s, max_output_bytes, memory_mb, started, list(layers)
        )
    finally:
        if report_write >= 0:
            os.close(report_write)
        os.close(report_read)
        shutil.rmtree(workdir, ignore_errors=True)


def _feed_stdin(proc: subprocess.Popen[bytes], data: bytes) -> None:
    try:
        if data:
            proc.stdin.write(data)  # type: ignore[union-attr]
        proc.stdin.close()  # type: ignore[union-attr]
    except (BrokenPipeError, OSError):
        return  # the child exited or closed stdin: nothing more to give it


def _supervise(
    proc: subprocess.Popen[bytes],
    report_fd: int,
    stdin: str,
    timeout_s: float,
    max_output_bytes: int,
    memory_mb: int,
    started: float,
    layers: list[str],
) -> SandboxResult:
    feeder = threading.Thread(target=_feed_stdin, args=(proc, stdin.encode()), daemon=True)
    feeder.start()
    buffers = {"stdout": bytearray(), "stderr": bytearray(), "report": bytearray()}
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, "stdout")  # type: ignore[arg-type]
    selector.register(proc.stderr, selectors.EVENT_READ, "stderr")  # type: ignore[arg-type]
    selector.register(report_fd, selectors.EVENT_READ, "report")
    deadline = started + timeout_s
    timed_out, killed_reason = False, None
    open_streams = 3
    while open_streams:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out, killed_reason = True, f"wall-clock timeout ({timeout_s:g} s)"
            break
        for key, _ in selector.select(timeout=min(remaining, 0.5)):
            fd = key.fd
            chunk = os.read(fd, 65536)
            if not chunk:
                selector.unregister(key.fileobj)
                open_streams -= 1
                continue
            buffers[key.data].extend(chunk)
        if len(buffers["stdout"]) + len(buffers["stderr"]) > max_output_bytes:
            killed_reason = f"output limit ({max_output_bytes} bytes) exceeded"
            break
    if killed_reason:
        _kill_group(proc)
    selector.close()
    try:
        exit_code = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        exit_code = proc.wait()
    _kill_group(proc)  # anything left in the group (there should be nothing: fork is refused)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()
    feeder.join(timeout=1)
    stdout = bytes(buffers["stdout"][:max_output_bytes]).decode("utf-8", errors="replace")
    stderr = bytes(buffers["stderr"][:max_output_bytes]).decode("utf-8", errors="replace")
    violations = [line for line in bytes(buffers["report"]).decode(errors="replace").splitlines() if line]
    if killed_reason is None:
        if exit_code in (-signal.SIGXCPU, -signal.SIGKILL) and not timed_out:
            killed_reason = "CPU time limit exceeded"
        elif exit_code == -signal.SIGXFSZ:
            killed_reason = "file size limit exceeded"
        elif exit_code != 0 and "MemoryError" in stderr[-2000:]:
            killed_reason = f"memory limit ({memory_mb} MiB) exceeded"
        elif exit_code != 0 and violations:
            killed_reason = f"refused by the sandbox: {violations[0]}"
    return SandboxResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        timed_out=timed_out,
        killed_reason=killed_reason,
        violations=violations,
        duration_s=round(time.monotonic() - started, 3),
        isolation=layers,
    )
