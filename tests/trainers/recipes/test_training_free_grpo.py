"""Training-Free GRPO end to end on a real (tiny) model: the groups' contrasts edit the experience library, the
next rollouts and the held-out evaluation carry it in their prompt, and no weight changes. The experience
model is a real OpenAI-compatible server on a local port answering with fixed edits, as a user's endpoint
would (the tiny model's own answers are noise)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import torch

from trainers.recipes.grpo import train
from trainers.sdk import wire_check
from trainers.sdk.events import MemorySink

EDITS = ["ADD: Answer with a single short word.", "MODIFY G1: Answer with one word, then stop."]


@pytest.fixture()
def experience_endpoint() -> Iterator[dict[str, Any]]:
    """A chat-completions server whose n-th answer is EDITS[n] (then NONE); it records the prompts."""
    seen: dict[str, Any] = {"prompts": [], "keys": []}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 — http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen["prompts"].append(body["messages"][0]["content"])
            seen["keys"].append(self.headers.get("Authorization", ""))
            n = len(seen["prompts"]) - 1
            reply = {
                "choices": [{"message": {"content": EDITS[n] if n < len(EDITS) else "NONE"}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10},
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    seen["url"] = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


def test_the_library_grows_from_contrasts_and_reaches_the_next_prompts(tiny, toy_env, experience_endpoint):
    model, tokenizer = tiny
    before = {k: v.clone() for k, v in model.state_dict().items()}
    sink = MemorySink()
    config = {
        "preset": "training_free_grpo",
        "max_steps": 3,
        "group_size": 4,
        "prompts_per_step": 1,
        "max_new_tokens": 6,
        "max_turns": 1,
        "eval_tasks": 2,
        "eval_every": 0,
        "checkpoint_every": 0,
        "temperature": 1.0,
        "experience_task_set": 1,
        "experience_model": "scripted",
        "experience_base_url": experience_endpoint["url"],
        "experience_api_key_secret": "EXPERIENCE_KEY",
    }
    result = train(
        config,
        sink=sink,
        env_factory=toy_env,
        model=model,
        tokenizer=tokenizer,
        secrets={"EXPERIENCE_KEY": "sk-exp"},
    )
    assert result.status == "SUCCEEDED"
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), f"{key} changed: Training-Free GRPO must not train weights"
    assert wire_check.check_batch({"events": sink.events}) == {}

    libraries = [e for e in sink.events if e["type"] == "experience"]
    assert [e["step"] for e in libraries] == [0, 1, 2, 3]
    assert libraries[0]["items"] == []
    asked = [e for e in libraries if e["groups_asked"]]
    assert asked, "the toy rewards vary within a group: some step had a contrast to ask about"
    first = asked[0]
    assert first["edits"][0] | {"group": 0} == {
        "op": "add",
        "id": "G1",
        "text": "Answer with a single short word.",
        "before": "",
        "applied": True,
        "reason": "",
        "group": 0,
    }
    assert first["prompt_tokens"] == 100 and first["completion_tokens"] == 10
    assert experience_endpoint["keys"][0] == "Bearer sk-exp"
    assert "Better attempt (reward" in experience_endpoint["prompts"][0]

    def system_prompts(step: int, split: str) -> set[str]:
        return {
            item["turns"][0]["text"]
            for e in sink.events
            if e["type"] == "trajectories" and e["step"] == step
            for item in e["items"]
            if item["split"] == split
        }

    # Step s's rollouts had step s−1's library in their prompt; the evaluation at step s had step s's.
    for later in range(first["step"] + 1, 4):
        prompts = system_prompts(later, "train")
        assert prompts and all("[G1] " in p for p in prompts)
    assert all("[G1]" not in p for p in system_prompts(first["step"], "train"))
    assert all("Experiences" not in p for p in system_prompts(0, "eval"))
    assert all("[G1] " in p for p in system_prompts(3, "eval"))
    tasks = {
        i["task_id"]
        for e in sink.events
        if e["type"] == "trajectories"
        for i in e["items"]
        if i["split"] == "train"
    }
    assert len(tasks) == 1  # a task set of one, gone over in three epochs
    metrics = [e["values"] for e in sink.events if e["type"] == "metrics" and e.get("split") == "train"]
    assert metrics[-1]["epoch"] == 3.0
    assert metrics[-1]["experience/tokens_total"] == 110.0 * len(asked)
    assert metrics[-1]["experience/items"] == 1.0
