"""A free port on 127.0.0.1, for the servers and containers the `openenv` kind starts
(`trainers.envs.openenv_server`, `trainers.envs.openenv_container`)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
