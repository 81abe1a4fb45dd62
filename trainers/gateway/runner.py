"""Run an agent entry point in a process of its own: `python -m trainers.gateway.runner module:function`.

The `agent` kind starts this for `isolation: process`, so a hung agent can be killed. The task, the
session and the gateway come in environment variables (`ROLLOUT_STUDIO_TASK`, `OPENAI_BASE_URL`,
`OPENAI_API_KEY`, `ROLLOUT_STUDIO_GATEWAY_URL`, `ROLLOUT_STUDIO_SESSION_ID`); what the entry point
returns goes back through the session API (`POST /v1/sessions/<id>/reward`). An exception exits
with status 1 and its traceback on stderr, which the episode's error shows.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or ":" not in args[0]:
        print("usage: python -m trainers.gateway.runner module:function", file=sys.stderr)
        return 2
    import openai

    from trainers.envs.agent import agent_result, resolve_entry_point

    agent = resolve_entry_point(args[0])
    task = json.loads(os.environ["ROLLOUT_STUDIO_TASK"])
    timeout = float(os.environ.get("ROLLOUT_STUDIO_TIMEOUT_S") or 300)
    with openai.OpenAI(
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ["OPENAI_API_KEY"],
        timeout=timeout,
        max_retries=0,
    ) as client:
        result = agent(task, client)
    reward, info, problem = agent_result(result)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    if reward is not None or info:
        url = f"{os.environ['ROLLOUT_STUDIO_GATEWAY_URL']}/v1/sessions/{os.environ['ROLLOUT_STUDIO_SESSION_ID']}/reward"
        body = json.dumps({"reward": reward, "info": info}).encode()
        request = urllib.request.Request(
            url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
