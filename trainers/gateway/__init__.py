"""The agent gateway: the user's own agent, unchanged, trains through an OpenAI-compatible endpoint.

`Gateway` (server.py) serves the run's generation backend as `/v1/chat/completions` and records every
call of a session as exact tokens (sessions.py); `trainers.envs.agent` is the environment kind that
starts a gateway, runs the agent once per episode and turns the sessions into rollouts. The HTTP
shapes are in protocol.py; the request batching in batching.py. Documented in docs/api.md
("Agent gateway").
"""

from trainers.gateway.protocol import ApiError
from trainers.gateway.server import Gateway
from trainers.gateway.sessions import Session

__all__ = ["ApiError", "Gateway", "Session"]
