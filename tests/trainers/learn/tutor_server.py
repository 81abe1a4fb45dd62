"""A tiny OpenAI-compatible server that answers like an LLM asked for easier variants of a failed sum — run
as its own process by the curriculum's LLM-generator tests (`python tutor_server.py`; it prints its port).

For a failed "What is A + B?" it writes, as a chatty model would: a line of chatter, one good variant, one
whose stated answer is wrong, and a task without its answer; to anything else it answers without the format.
`GET /v1/models` lists its one model, "tutor"."""

from __future__ import annotations

import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "tutor"


def reply(prompt: str) -> str:
    found = re.search(r"What is (\d+) \+ (\d+)\?", prompt)
    if not found:
        return "I am not sure what you mean."
    a, b = int(found.group(1)), int(found.group(2))
    return (
        "Sure! Here are easier ones.\n"
        f"1. TASK: What is {a - 1} + {b}?\n"
        f"   ANSWER: {a - 1 + b}\n"
        f"2. **Task:** What is {a} + {b - 1}?\n"
        f"   **Answer:** {a + b + 7}\n"
        "3. TASK: What is 1 + 1?\n"
    )


class Handler(BaseHTTPRequestHandler):
    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 — http.server's name
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": "not found"}})
            return
        if body.get("model") != MODEL:
            self._send(404, {"error": {"message": f"no model {body.get('model')!r}"}})
            return
        prompt = body["messages"][-1]["content"]
        text = reply(prompt)
        self._send(
            200,
            {
                "id": "cmpl-1",
                "object": "chat.completion",
                "model": MODEL,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())},
            },
        )

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()
