"""Multi-turn rollouts at the token level.

A rollout keeps the exact token sequence the model saw and produced: the initial prompt (system
prompt with the tools, the task), then alternately the tokens the model sampled (loss mask 1) and
the tokens the environment added (the end of the assistant message, the tool's answer, the header of
the next assistant message: loss mask 0). Nothing is re-tokenized after sampling, so the learner
scores exactly what was sampled.

All active trajectories of all groups generate together, one batched call per turn; the first turn
of a group shares one prompt, which the transformers backend prefills once.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainers.backends.base import GenerationBackend
from trainers.types import Task, Trajectory, Turn

log = logging.getLogger(__name__)

DEFAULT_STOP = ("</tool_call>", "</answer>")


class ChatFormat:
    """Token ids of chat pieces under the tokenizer's chat template, appended turn by turn.

    The template is rendered around placeholder messages and the rendered texts are diffed, so this
    works for any template that renders a conversation as the concatenation of its messages (ChatML,
    Llama 3, Qwen…) without knowing its markup.
    """

    _BASE = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos_text = tokenizer.eos_token or ""
        prompt = self.render(self._BASE, generation_prompt=True)
        self._after_assistant = self.render([*self._BASE, {"role": "assistant", "content": "Z"}], generation_prompt=False)
        if self._after_assistant.startswith(prompt + "Z"):
            self.close_text = self._after_assistant[len(prompt) + 1:]
        else:  # a template that rewrites assistant content: end the message with eos
            self.close_text = self.eos_text + "\n"
        self._role_ok: dict[str, bool] = {}

    def render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt(
        self, system: str, user: str, examples: Sequence[dict[str, str]] = ()
    ) -> tuple[list[int], list[int]]:
        """(system message + example ids, user message + assistant header ids): the initial prompt.

        `examples` are the environment's few-shot messages, placed between the system prompt and the
        task; a role the template rejects ("tool" in some) is sent as "user", as in `run_episode`.
        """
        prefix = [{"role": "system", "content": system}, *(
            {"role": m["role"] if self._supports_role(m["role"]) else "user", "content": m["content"]}
            for m in examples)]
        prefix_text = self.render(prefix, generation_prompt=False)
        full = self.render([*prefix, {"role": "user", "content": user}], generation_prompt=True)
        if full.startswith(prefix_text):
            return self.encode(prefix_text), self.encode(full[len(prefix_text):])
        return [], self.encode(full)

    def continuation(self, role: str, content: str, ended_with_eos: bool) -> list[int]:
        """Ids that close the assistant message just sampled, add a `role` message and open the next
        assistant message. `ended_with_eos`: the sample already ends with the end-of-message token."""
        role = role if self._supports_role(role) else "user"
        extended = self.render([*self._BASE, {"role": "assistant", "content": "Z"}, {"role": role, "content": content}],
                               generation_prompt=True)
        close = self.close_text
        if ended_with_eos and self.eos_text and close.startswith(self.eos_text):
            close = close[len(self.eos_text):]
        if extended.startswith(self._after_assistant):
            return self.encode(close + extended[len(self._after_assistant):])
        return self.encode(close + content + self.eos_text)

    def _supports_role(self, role: str) -> bool:
        if role not in self._role_ok:
            try:
                self.render([*self._BASE, {"role": "assistant", "content": "Z"}, {"role": role, "content": "x"}], True)
                self._role_ok[role] = True
            except Exception:  # noqa: BLE001 — templates raise anything (TemplateError, ValueError) for roles they reject
                self._role_ok[role] = False
        return self._role_ok[role]


@dataclass
class Rollout:
    """One trajectory with its tokens, ready for the learner."""

    group: int
    sample: int
    task: Task
    seed: int
    trajectory: Trajectory
    prompt_ids: list[int]  # the initial prompt: identical across the group
    completion_ids: list[int] = field(default_factory=list)  # everything after the prompt
    loss_mask: list[int] = field(default_factory=list)  # 1 = sampled by the model
    behaviour_logprobs: list[float] = field(default_factory=list)  # sampler's log-probs (0 for env tokens)
    finish_reasons: list[str] = field(default_factory=list)
    env_state: Any = None
    policy_version: int = 0
    split: str = "train"
    # Filled in after scoring.
    reward: float = 0.0
    components: list[dict[str, Any]] = field(default_factory=list)
    turn_rewards: dict[int, float] = field(default_factory=dict)
    advantage: float = 0.0

    @property
    def model_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def longest_turn(self) -> int:
        lengths = [len(t.token_ids or []) for t in self.trajectory.turns if t.role == "assistant"]
        return max(lengths, default=0)

    def to_item(self) -> dict[str, Any]:
        """The dict reported in a `trajectories` event (see trainers.events)."""
        traj = self.trajectory
        return {
            "group": self.group,
            "sample": self.sample,
            "task_id": self.task.id,
            "task": {"id": self.task.id, "prompt": self.task.prompt, "answer": _jsonable(self.task.answer),
                     "meta": _jsonable(self.task.meta)},
            "seed": self.seed,
            "split": self.split,
            "reward": self.reward,
            "env_reward": traj.env_reward,
            "components": self.components,
            "turn_rewards": {str(k): v for k, v in sorted(self.turn_rewards.items())},
            "advantage": self.advantage,
            "status": traj.status,
            "policy_version": self.policy_version,
            "prompt_tokens": len(self.prompt_ids),
            "completion_tokens": self.model_tokens,
            "tool_calls": traj.tool_calls,
            "turns": [t.to_dict() for t in traj.turns],
            "env_state": _jsonable(self.env_state),
            "info": _jsonable(traj.info),
        }


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "to_dict"):
        return _jsonable(value.to_dict())
    return str(value)


@dataclass
class _Episode:
    env: Any
    rollout: Rollout
    max_turns: int
    done: bool = False


def _tool_fields(text: str, tools: Any) -> tuple[str | None, dict[str, Any] | None]:
    from trainers.toolcalls import has_tool_call, parse_tool_calls

    if not has_tool_call(text):
        return None, None
    parsed = parse_tool_calls(text, list(tools) if tools else None)
    if isinstance(parsed, list) and parsed:
        return parsed[0].name, parsed[0].arguments
    return getattr(parsed, "tool_name", None) or "invalid", None


def generate_rollouts(
    backend: GenerationBackend,
    chat: ChatFormat,
    make_env: Callable[[], Any],
    tasks: Sequence[Task],
    seeds: Sequence[Sequence[int]],
    *,
    max_turns: int,
    max_new_tokens: int,
    max_context_tokens: int,
    temperature: float,
    top_p: float,
    generation_seed: int | None,
    stop: Sequence[str] = DEFAULT_STOP,
    policy_version: int = 0,
    split: str = "train",
    first_group: int = 0,
) -> list[list[Rollout]]:
    """Roll out `len(seeds[i])` episodes of `tasks[i]` (a group each); returns rollouts per group.

    `max_turns` caps model turns (0: the environment's own `max_turns`). A trajectory ends `ok`
    when the environment says done, `truncated` when it runs out of turns or context or its last
    message hit `max_new_tokens`, `error` when the environment raised.
    """
    episodes: list[list[_Episode]] = []
    for g, (task, group_seeds) in enumerate(zip(tasks, seeds, strict=True)):
        group = []
        for s, seed in enumerate(group_seeds):
            env = make_env()
            user_text = env.reset(task, seed)
            system_text = env.system_prompt()
            examples = env.example_messages() if hasattr(env, "example_messages") else []
            # The few-shot example's tokens ride with the system turn (all masked): the model sees
            # them, but they are not turns of this trajectory, so no rubric counts the example's call.
            system_ids, user_ids = chat.prompt(system_text, user_text, examples)
            trajectory = Trajectory(task=task, turns=[
                Turn(role="system", text=system_text, token_ids=system_ids, loss_mask=[0] * len(system_ids)),
                Turn(role="user", text=user_text, token_ids=user_ids, loss_mask=[0] * len(user_ids)),
            ])
            if examples:
                trajectory.info["prompt_examples"] = list(examples)
            env_turns = getattr(env, "max_turns", 0) or 0
            turns = min(t for t in (max_turns, env_turns) if t > 0) if (max_turns or env_turns) else 1
            group.append(_Episode(env, Rollout(
                group=first_group + g, sample=s, task=task, seed=int(seed), trajectory=trajectory,
                prompt_ids=system_ids + user_ids, policy_version=policy_version, split=split), turns))
        episodes.append(group)
    flat = [e for group in episodes for e in group]
    # An episode may already be over (a broken env); the rest take turns together.
    turn = 0
    while True:
        active = [e for e in flat if not e.done and turn < e.max_turns]
        for e in flat:
            if not e.done and turn >= e.max_turns:
                e.done = True
                e.rollout.trajectory.status = "truncated"
        if not active:
            break
        by_budget: dict[int, list[_Episode]] = {}
        for e in active:
            used = len(e.rollout.prompt_ids) + len(e.rollout.completion_ids)
            budget = min(max_new_tokens, max_context_tokens - used)
            if budget < 1:
                e.done = True
                e.rollout.trajectory.status = "truncated"
                continue
            by_budget.setdefault(budget, []).append(e)
        for budget, batch in sorted(by_budget.items()):
            seed = None if generation_seed is None else generation_seed + 7919 * turn + budget
            completions = backend.generate(
                [e.rollout.prompt_ids + e.rollout.completion_ids for e in batch], n=1, max_new_tokens=budget,
                temperature=temperature, top_p=top_p, stop=stop, seed=seed)
            for e, completion in zip(batch, completions, strict=True):
                _advance(e, completion, chat, turn, max_context_tokens)
        turn += 1
    for e in flat:
        try:
            e.rollout.env_state = e.env.state() if hasattr(e.env, "state") else None
        except Exception as exc:  # noqa: BLE001 — a broken env's state() must not lose the rollout
            e.rollout.env_state = {"error": repr(exc)}
        e.rollout.trajectory.info.setdefault("turns", sum(1 for t in e.rollout.trajectory.turns if t.role == "assistant"))
    return [[e.rollout for e in group] for group in episodes]


def _advance(e: _Episode, completion: Any, chat: ChatFormat, turn: int, max_context_tokens: int) -> None:
    r = e.rollout
    traj = r.trajectory
    r.completion_ids += completion.token_ids
    r.loss_mask += [1] * len(completion.token_ids)
    r.behaviour_logprobs += list(completion.logprobs or [0.0] * len(completion.token_ids))
    r.finish_reasons.append(completion.finish_reason)
    assistant = Turn(role="assistant", text=completion.text, token_ids=list(completion.token_ids),
                     loss_mask=[1] * len(completion.token_ids))
    traj.turns.append(assistant)
    try:
        result = e.env.step(completion.text)
    except Exception as exc:  # noqa: BLE001 — the environment ran untrusted model output; record, don't crash
        log.warning("environment step failed: %r", exc)
        traj.status = "error"
        traj.info["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        e.done = True
        return
    info = dict(getattr(result, "info", None) or {})
    # The environment knows which tool it ran; parse only when it does not say.
    if "tool_name" in info or info.get("tool_error"):
        assistant.tool_name = info.get("tool_name") or "invalid"
        assistant.tool_args = info.get("tool_args")
    else:
        assistant.tool_name, assistant.tool_args = _tool_fields(completion.text, getattr(e.env, "tools", None))
    reward = float(getattr(result, "reward", 0.0) or 0.0)
    traj.env_reward += reward
    traj.info.setdefault("step_rewards", []).append(reward)
    if reward:
        assistant.reward = reward
    if info:
        traj.info["last_step"] = _jsonable(info)
        for key in ("correct", "answer"):
            if key in info:
                traj.info[key] = _jsonable(info[key])
    truncated = bool(info.get("truncated")) or completion.finish_reason == "length"
    if getattr(result, "done", False):
        e.done = True
        traj.status = "truncated" if truncated else "ok"
        return
    if turn + 1 >= e.max_turns:
        e.done = True
        traj.status = "truncated"
        return
    observation = str(getattr(result, "observation", "") or "")
    role = "tool" if assistant.tool_name else "user"
    ids = chat.continuation(role, observation, ended_with_eos=completion.finish_reason == "eos")
    if len(r.prompt_ids) + len(r.completion_ids) + len(ids) >= max_context_tokens:
        e.done = True
        traj.status = "truncated"
        return
    r.completion_ids += ids
    r.loss_mask += [0] * len(ids)
    r.behaviour_logprobs += [0.0] * len(ids)
    traj.turns.append(Turn(role=role, text=observation, tool_name=assistant.tool_name if role == "tool" else None,
                           tool_result=observation if role == "tool" else None, token_ids=ids, loss_mask=[0] * len(ids)))
