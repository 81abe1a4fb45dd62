"""An agent run as a command: `python agent_command.py {base_url} {task_json} [--fail]`.

It reads its endpoint from the arguments (OPENAI_API_KEY from the environment), calls the model once
and reports the reward through the gateway's session API, as an agent in another language would.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request

import openai


def main() -> int:
    base_url, task = sys.argv[1], json.loads(sys.argv[2])
    if "--fail" in sys.argv:
        print(f"cannot solve {task['id']}: no strategy", file=sys.stderr)
        return 3
    client = openai.OpenAI(base_url=base_url, api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": task["prompt"]}], max_tokens=64
    )
    reward = 1.0 if str(task.get("answer")) in (reply.choices[0].message.content or "") else 0.5
    url = f"{os.environ['ROLLOUT_STUDIO_GATEWAY_URL']}/v1/sessions/{os.environ['ROLLOUT_STUDIO_SESSION_ID']}/reward"
    request = urllib.request.Request(
        url,
        data=json.dumps({"reward": reward, "info": {"by": "command"}}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=10).close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
