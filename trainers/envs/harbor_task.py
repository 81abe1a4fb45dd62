"""harbor: Harbor task directories (instruction, environment, tests) as an environment, run in Docker.

A Harbor task (harbor 0.25's format, `harbor.models.task`) is a folder:

    task.toml            [verifier] timeout_sec, [agent] timeout_sec, [environment] build_timeout_sec …
    instruction.md       what the agent is asked to do (the task's prompt)
    environment/         the Docker build context (Dockerfile) of the container the agent works in
    tests/test.sh        the verifier: run in the container after the agent, it writes the reward to
                         /logs/verifier/reward.txt (a number) or /logs/verifier/reward.json ({name: number})
    solution/solve.sh    (optional) the reference solution

`path` names one task folder or a folder of them. Each episode builds the task's image (once per image
content: tagged by a hash of the environment folder), starts a container (no network, removed at the
end), and offers the policy one tool, `bash`, that runs a command in it (`docker exec`, with a time-out;
output clipped). When the model answers without a call — or the episode runs out of turns — the task's
own tests are copied to /tests and `bash /tests/test.sh` runs as Harbor's verifier does; its reward file
is the episode's reward (reward.json: "reward" if present, else the sum; every entry kept in
`info["harbor"]`). A verifier that writes no reward gives 0 and says so.

harbor itself is not imported: harbor 0.25 requires Python >= 3.12 (its trial and verifier code use 3.12
syntax) and the workers run 3.11; the tests check our reading of task.toml against Harbor's own
`TaskConfig` (tests/harbor_models.py). Only Docker environments (a Dockerfile) are run; a task whose
environment is a docker-compose file or needs a GPU is refused in words; `[environment] docker_image` (a
prebuilt image) is used as it is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import tomllib
import uuid
from pathlib import Path
from typing import Any

from trainers.envs.base import Split, StepResult, ToolEnvironment
from trainers.envs.from_dataset import split_tasks
from trainers.envs.tools import ToolError
from trainers.types import Task, ToolCall, ToolSpec

log = logging.getLogger(__name__)

OUTPUT_CHARS = 4000
BASH = ToolSpec(
    "bash",
    "Run a bash command in the task's container and get its output (stdout and stderr, exit code).",
    {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "the command line to run"}},
        "required": ["command"],
    },
)


def _docker(*args: str, timeout_s: float, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            ["docker", *args], input=stdin, capture_output=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError as exc:
        raise ValueError("the harbor kind runs tasks in Docker: no docker client on this worker") from exc


def read_task(folder: Path) -> dict[str, Any]:
    """One task folder's parts, checked: its config (task.toml), instruction and environment."""
    config_path, instruction = folder / "task.toml", folder / "instruction.md"
    if not config_path.is_file() or not instruction.is_file():
        raise ValueError(f"{folder}: a Harbor task needs task.toml and instruction.md")
    try:
        config = tomllib.loads(config_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{config_path}: {exc}") from exc
    environment = config.get("environment") or {}
    image = environment.get("docker_image")
    if not image and not (folder / "environment" / "Dockerfile").is_file():
        raise ValueError(
            f"{folder}: only Docker environments (environment/Dockerfile, or [environment] docker_image) are run here"
        )
    if not (folder / "tests" / "test.sh").is_file():
        raise ValueError(f"{folder}: the verifier tests/test.sh is missing")
    if environment.get("gpus"):
        raise ValueError(f"{folder}: the task asks for GPUs, which the harbor kind does not give containers")
    return {
        "name": str((config.get("task") or {}).get("name") or folder.name),
        "folder": str(folder),
        "instruction": instruction.read_text(encoding="utf-8").strip(),
        "verifier_timeout_s": float((config.get("verifier") or {}).get("timeout_sec") or 600.0),
        "build_timeout_s": float(environment.get("build_timeout_sec") or 600.0),
        "docker_image": str(image) if image else None,
    }


def task_folders(path: str) -> list[Path]:
    root = Path(path).expanduser()
    if (root / "task.toml").is_file():
        return [root]
    if not root.is_dir():
        raise ValueError(f"path: {path!r} is not a Harbor task folder or a folder of them")
    found = sorted(p.parent for p in root.glob("*/task.toml"))
    if not found:
        raise ValueError(f"path: no Harbor task (a folder with task.toml) in {path!r}")
    return found


class HarborTaskEnvironment(ToolEnvironment):
    kind = "harbor"

    def __init__(
        self,
        path: str,
        max_turns: int = 8,
        max_tool_calls: int = 8,
        command_timeout_s: float = 60.0,
        network: bool = False,
        eval_fraction: float = 0.1,
    ) -> None:
        super().__init__(max_turns=max_turns, max_tool_calls=max_tool_calls, few_shot=False)
        self.path, self.command_timeout_s, self.network = path, command_timeout_s, network
        self.eval_fraction = eval_fraction
        self.harbor_tasks = [read_task(folder) for folder in task_folders(path)]
        self.tools = [BASH]
        self.container: str | None = None
        self.current: dict[str, Any] | None = None
        self.verified: dict[str, Any] | None = None

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        pool = [
            Task(
                id=f"harbor:{t['name']}",
                prompt=t["instruction"],
                answer=None,
                meta={"harbor_task": t["folder"]},
            )
            for t in self.harbor_tasks
        ]
        return split_tasks(
            pool, split, n, seed, eval_fraction=self.eval_fraction, kind=self.kind, source=self.path
        )

    def system_prompt(self) -> str:
        return (
            "You work in a Linux container to complete the task. Run shell commands with the bash tool; "
            "when the task is done, answer without a tool call.\n\n" + self.tools_prompt()
        )

    # -- the container

    @staticmethod
    def image_for(task: dict[str, Any]) -> str:
        """The task's prebuilt `docker_image`, or its environment built (once), tagged by a hash of the files."""
        if task.get("docker_image"):
            return str(task["docker_image"])
        context = Path(task["folder"]) / "environment"
        digest = hashlib.sha256()
        for file in sorted(p for p in context.rglob("*") if p.is_file()):
            digest.update(str(file.relative_to(context)).encode() + b"\0" + file.read_bytes())
        tag = f"rollout-studio-harbor/{Path(task['folder']).name.lower()}:{digest.hexdigest()[:16]}"
        if _docker("image", "inspect", tag, timeout_s=30).returncode != 0:
            built = _docker("build", "-t", tag, str(context), timeout_s=task["build_timeout_s"])
            if built.returncode != 0:
                tail = built.stderr.decode("utf-8", "replace").strip()[-2000:]
                raise RuntimeError(f"building the environment of {task['name']} failed: {tail}")
        return tag

    def reset(self, task: Task, seed: int) -> str:
        self.close()
        prompt = super().reset(task, seed)
        folder = task.meta.get("harbor_task")
        self.current = next((t for t in self.harbor_tasks if t["folder"] == folder), None)
        if self.current is None:
            raise ValueError(f"task {task.id} is not one of this environment's Harbor tasks")
        image = self.image_for(self.current)
        name = f"rs-harbor-{uuid.uuid4().hex[:12]}"
        started = _docker(
            "run",
            "-d",
            "--rm",
            "--name",
            name,
            *([] if self.network else ["--network", "none"]),
            image,
            "sleep",
            "infinity",
            timeout_s=120,
        )
        if started.returncode != 0:
            raise RuntimeError(
                f"the task's container did not start: {started.stderr.decode('utf-8', 'replace')[-2000:]}"
            )
        self.container, self.verified = name, None
        self._exec("mkdir -p /logs/verifier /logs/agent /tests", timeout_s=30)
        return prompt

    def _exec(self, command: str, *, timeout_s: float) -> tuple[int, str]:
        assert self.container is not None
        try:
            done = _docker("exec", self.container, "bash", "-c", command, timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            return 124, f"(the command did not finish within {timeout_s:g} s)"
        text = (done.stdout + done.stderr).decode("utf-8", "replace")
        return done.returncode, text

    def run_tool(self, call: ToolCall) -> str:
        if call.name != "bash" or not isinstance(call.arguments.get("command"), str):
            raise ToolError('bash takes {"command": "…"}')
        if self.container is None:
            raise ToolError("the task's container is not running")
        code, text = self._exec(call.arguments["command"], timeout_s=self.command_timeout_s)
        if len(text) > OUTPUT_CHARS:
            text = text[: OUTPUT_CHARS // 2] + "\n…(clipped)…\n" + text[-OUTPUT_CHARS // 2 :]
        return f"{text.rstrip()}\n(exit code {code})".lstrip()

    # -- the verifier

    def verify(self) -> tuple[float, dict[str, Any]]:
        """Copy the task's tests in, run test.sh as Harbor's verifier does, read its reward file."""
        if self.verified is not None:
            return self.verified["reward"], {"harbor": self.verified}
        assert self.current is not None and self.container is not None
        tests = Path(self.current["folder"]) / "tests"
        copied = _docker("cp", f"{tests}/.", f"{self.container}:/tests", timeout_s=60)
        if copied.returncode != 0:
            raise RuntimeError(f"copying the tests in failed: {copied.stderr.decode('utf-8', 'replace')}")
        code, output = self._exec(
            "chmod +x /tests/test.sh; bash /tests/test.sh > /logs/verifier/test-stdout.txt 2>&1",
            timeout_s=self.current["verifier_timeout_s"],
        )
        _, text = self._exec("cat /logs/verifier/reward.json 2>/dev/null", timeout_s=30)
        rewards: dict[str, float] = {}
        if text.strip():
            try:
                data = json.loads(text)
                rewards = {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}
            except (ValueError, AttributeError):
                rewards = {}
        else:
            _, text = self._exec("cat /logs/verifier/reward.txt 2>/dev/null", timeout_s=30)
            try:
                rewards = {"reward": float(text.strip())}
            except ValueError:
                rewards = {}
        _, stdout = self._exec("tail -c 2000 /logs/verifier/test-stdout.txt", timeout_s=30)
        reward = rewards.get("reward", sum(rewards.values())) if rewards else 0.0
        self.verified = {
            "task": self.current["name"],
            "reward": float(reward),
            "rewards": rewards,
            "exit_code": code,
            "test_output": stdout.strip(),
            **({} if rewards else {"problem": "the verifier wrote no reward file (reward 0)"}),
        }
        return float(reward), {"harbor": self.verified}

    def grade(self, text: str) -> tuple[float, dict[str, Any]]:
        self.last_answer = text
        return self.verify()

    def step(self, assistant_text: str) -> StepResult:
        result = super().step(assistant_text)
        if result.done and self.verified is None:  # out of turns: the tests judge what was done
            reward, info = self.verify()
            result.reward += reward
            result.info.update(info)
        return result

    def close(self) -> None:
        super().close()
        if self.container is not None:
            _docker("rm", "-f", self.container, timeout_s=60)
            self.container = None

    def state(self) -> dict[str, Any]:
        return {**super().state(), "harbor": self.verified}

    def preview_can_reset(self) -> bool:
        return False  # a preview builds no image and starts no container: the instruction is the task

    def preview_health(self) -> str:
        names = ", ".join(t["name"] for t in self.harbor_tasks[:5])
        return f"{len(self.harbor_tasks)} Harbor task(s): {names}. Each episode runs in a fresh Docker container."
