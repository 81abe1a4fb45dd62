"""Multi-turn rollouts at the token level.

A rollout keeps the exact token sequence the model saw and produced: the initial prompt (system
prompt with the tools, the task), then alternately the tokens the model sampled (loss mask 1) and
the tokens the environment added (the end of the assistant message, the tool's answer, the header of
the next assistant message: loss mask 0). Nothing is re-tokenized after sampling, so the learner
scores exactly what was sampled.

All active trajectories of all groups generate together (`GenerationBackend.generate_continuous`): the
transformers backend starts an episode's next turn as soon as its last one ends, while the others decode;
other backends generate a turn of every episode at a time. The first turn of a group shares one prompt,
which the transformers backend prefills once.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from trainers.rollout.backends.base import GenerationBackend, Request
from trainers.rollout.chat import ChatFormat
from trainers.rollout.toolformats import STUDIO, ToolFormat
from trainers.sdk.cancel import check_cancel
from trainers.types import Task, ToolCall, ToolSpec, Trajectory, Turn, applied_max_turns

log = logging.getLogger(__name__)

DEFAULT_STOP = STUDIO.stop
# Called after each generation turn with (turn, groups done, groups in all).
GenerationProgress = Callable[[int, int, int], None]


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
    staleness: int = 0  # policy versions between the sampler and the learner that trained on it
    # Filled in after scoring.
    reward: float = 0.0
    components: list[dict[str, Any]] = field(default_factory=list)
    turn_rewards: dict[int, float] = field(default_factory=dict)
    advantage: float = 0.0
    # Per completion token, where per-turn rewards credit turns apart (trainers.learn.turn_credit); else None.
    token_advantages: list[float] | None = None
    # Where a branching rollout split off its parent (trainers.rollout.branched); None for a whole sample.
    branch: dict[str, Any] | None = None

    def has_signal(self) -> bool:
        """Whether the policy-gradient term can be non-zero: some token's advantage is not exactly 0."""
        return self.advantage != 0.0 or any(v != 0.0 for v in self.token_advantages or ())

    @property
    def model_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def longest_turn(self) -> int:
        lengths = [len(t.token_ids or []) for t in self.trajectory.turns if t.role == "assistant"]
        return max(lengths, default=0)

    def to_item(self) -> dict[str, Any]:
        """This trajectory in the wire format of a `trajectories` event (`trainers.sdk.wire.TRAJECTORY`).

        Per-turn rewards from the rubric travel on their turns (`turns[i].reward`)."""
        traj = self.trajectory
        turns = [t.to_dict() for t in traj.turns]
        for index, reward in self.turn_rewards.items():
            if 0 <= index < len(turns):
                turns[index]["reward"] = reward
        return {
            "group": self.group,
            "sample": self.sample,
            "task_id": self.task.id,
            "prompt": self.task.prompt,
            "seed": self.seed,
            "split": self.split,
            "reward": self.reward,
            "components": self.components,
            "advantage": self.advantage,
            "status": traj.status,
            "policy_version": self.policy_version,
            "staleness": self.staleness,
            "prompt_tokens": len(self.prompt_ids),
            "completion_tokens": self.model_tokens,
            "turns": turns,
            "env_state": _jsonable(self.env_state),
            "env_reward": float(traj.env_reward),
            "correct": _verdict(traj.info.get("correct")),
            "answer": answer_text(self.task.answer),
            "branch": self.branch,
        }


def _verdict(correct: Any) -> bool | None:
    """The environment's verdict as stored: True / False, None when it gave none (numpy bools included)."""
    return None if correct is None else bool(correct)


def answer_text(answer: Any) -> str:
    """A task's expected answer as the dashboard stores it: text as it is, anything else as JSON, None as ""."""
    if answer is None:
        return ""
    if isinstance(answer, str):
        return answer
    return json.dumps(_jsonable(answer))


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
    tool_format: ToolFormat = (
        STUDIO  # the run's format, or studio for an environment that reads calls its own way
    )
    done: bool = False

    @property
    def tools(self) -> list[ToolSpec]:
        return list(getattr(self.env, "tools", None) or [])


def _failed_start(
    env: Any, exc: Exception, task: Any, seed: int, group: int, sample: int, policy_version: int, split: str
) -> _Episode:
    """An episode whose environment could not start (reset raised: a dead server, a bad task): an
    `error` trajectory with the exception's text and no tokens, so it takes no turn and adds no loss,
    and the rest of the group goes on."""
    log.warning("environment reset failed: %r", exc)
    trajectory = Trajectory(task=task, turns=[], status="error")
    trajectory.info["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    rollout = Rollout(
        group=group,
        sample=sample,
        task=task,
        seed=int(seed),
        trajectory=trajectory,
        prompt_ids=[],
        policy_version=policy_version,
        split=split,
    )
    return _Episode(env, rollout, 0, done=True)


def adopt_tool_format(env: Any, tool_format: ToolFormat) -> ToolFormat:
    """Give `env` the run's tool format; the format the episode is rendered with (studio when the
    environment does not take one)."""
    adopt = getattr(env, "use_tool_format", None)
    return tool_format if adopt is not None and adopt(tool_format) else STUDIO


def tool_fields(
    text: str, tools: list[ToolSpec], tool_format: ToolFormat
) -> tuple[str | None, dict[str, Any] | None]:
    """The (tool name, arguments) an assistant turn records: its first call; ("invalid" or the named
    tool, None) for a malformed one; (None, None) without a call."""
    if not tool_format.has_call(text):
        return None, None
    parsed = tool_format.parse(text, tools or None)
    if isinstance(parsed, list) and parsed:
        return parsed[0].name, parsed[0].arguments
    return getattr(parsed, "tool_name", None) or "invalid", None


def episode_turns(max_turns: int, env: Any) -> int:
    """Model turns an episode may take: the smaller of the run's `max_turns` and the environment's
    own (0 = no limit from that side); 1 when neither sets one."""
    return applied_max_turns(max_turns, getattr(env, "max_turns", 0) or 0)


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
    progress: GenerationProgress | None = None,
) -> list[list[Rollout]]:
    """Roll out `len(seeds[i])` episodes of `tasks[i]` (a group each); returns rollouts per group.

    `max_turns` caps model turns (0: the environment's own `max_turns`). A trajectory ends `ok`
    when the environment says done, `truncated` when it runs out of turns or context or its last
    message hit `max_new_tokens`, `error` when the environment raised. `progress(turn, groups_done,
    groups)` is called after each turn (turn counts from 1), so a long generation is never silent.

    An environment that drives the model itself (the `agent` kind: the user's agent calls the model
    through the OpenAI-compatible gateway) has `drive_rollouts`, which gets every argument here and
    returns the rollouts in the same shape.
    """
    first_env = make_env() if any(seeds) else None
    drive = getattr(first_env, "drive_rollouts", None)
    if drive is not None:
        with backend.session():  # the agent's calls through the gateway reuse their conversations' prefixes
            return drive(
                backend,
                chat,
                tasks,
                seeds,
                max_turns=max_turns,
                max_new_tokens=max_new_tokens,
                max_context_tokens=max_context_tokens,
                temperature=temperature,
                top_p=top_p,
                generation_seed=generation_seed,
                stop=stop,
                policy_version=policy_version,
                split=split,
                first_group=first_group,
            )
    episodes: list[list[_Episode]] = []
    for g, (task, group_seeds) in enumerate(zip(tasks, seeds, strict=True)):
        group = []
        for s, seed in enumerate(group_seeds):
            env, first_env = (first_env, None) if first_env is not None else (make_env(), None)
            group.append(
                _start_episode(env, chat, task, seed, first_group + g, s, max_turns, policy_version, split)
            )
        episodes.append(group)
    flat = [e for group in episodes for e in group]
    with backend.session():  # each turn encodes only what the environment added (trainers/rollout/backends)
        _take_turns(
            backend,
            chat,
            episodes,
            max_new_tokens=max_new_tokens,
            max_context_tokens=max_context_tokens,
            temperature=temperature,
            top_p=top_p,
            generation_seed=generation_seed,
            stop=stop,
            progress=progress,
        )
    for e in flat:
        _finish_episode(e)
    return [[e.rollout for e in group] for group in episodes]


class IndependentRollouts:
    """The built-in `independent` rollout strategy (`trainers.parts`): `generate_rollouts` as it is."""

    def __init__(self, config: Any, options: dict[str, Any]) -> None:
        pass

    def generate(self, *args: Any, **kwargs: Any) -> list[list[Rollout]]:
        return generate_rollouts(*args, **kwargs)


def _start_episode(
    env: Any,
    chat: ChatFormat,
    task: Task,
    seed: int,
    group: int,
    sample: int,
    max_turns: int,
    policy_version: int,
    split: str,
) -> _Episode:
    """Reset `env` on `task` and encode the prompt: the episode ready for its first turn (or failed)."""
    tool_format = adopt_tool_format(env, chat.tool_format)
    try:
        user_text = env.reset(task, seed)
        system_text = env.system_prompt()
        examples = env.example_messages() if hasattr(env, "example_messages") else []
    except Exception as exc:  # noqa: BLE001 — a dead remote env fails its episodes, not the run
        return _failed_start(env, exc, task, seed, group, sample, policy_version, split)
    # The few-shot example's tokens ride with the system turn (all masked): the model sees
    # them, but they are not turns of this trajectory, so no rubric counts the example's call.
    system_ids, user_ids = chat.prompt(
        system_text, user_text, examples, tools=getattr(env, "tools", None), tool_format=tool_format
    )
    trajectory = Trajectory(
        task=task,
        turns=[
            Turn(role="system", text=system_text, token_ids=system_ids, loss_mask=[0] * len(system_ids)),
            Turn(role="user", text=user_text, token_ids=user_ids, loss_mask=[0] * len(user_ids)),
        ],
    )
    if examples:
        trajectory.info["prompt_examples"] = list(examples)
    rollout = Rollout(
        group=group,
        sample=sample,
        task=task,
        seed=int(seed),
        trajectory=trajectory,
        prompt_ids=system_ids + user_ids,
        policy_version=policy_version,
        split=split,
    )
    return _Episode(env, rollout, episode_turns(max_turns, env), tool_format)


def _finish_episode(e: _Episode) -> None:
    """Record the environment's final state and release it."""
    try:
        e.rollout.env_state = e.env.state() if hasattr(e.env, "state") else None
    except Exception as exc:  # noqa: BLE001 — a broken env's state() must not lose the rollout
        e.rollout.env_state = {"error": repr(exc)}
    if hasattr(e.env, "close"):
        e.env.close()  # release what the episode held (MCP sessions)
    e.rollout.trajectory.info.setdefault(
        "turns", sum(1 for t in e.rollout.trajectory.turns if t.role == "assistant")
    )


def _take_turns(
    backend: GenerationBackend,
    chat: ChatFormat,
    episodes: list[list[_Episode]],
    *,
    max_new_tokens: int,
    max_context_tokens: int,
    temperature: float,
    top_p: float,
    generation_seed: int | None,
    stop: Sequence[str],
    progress: GenerationProgress | None,
) -> None:
    """Every episode takes turns until it cannot take another (see `generate_rollouts`); an episode may
    already be over (a broken env). The backend schedules the turns (`generate_continuous`): as soon as
    one of an episode's turns is sampled, its environment steps and its next turn is handed back."""
    flat = [e for group in episodes for e in group]
    check_cancel()  # before the first turn (trainers.sdk.cancel)
    reported = _Progress(episodes, progress)

    def on_finish(request: Request, completion: Any) -> Request | None:
        e: _Episode = request.key
        turn = len(e.rollout.finish_reasons)  # the turns it took before this one
        _advance(e, completion, chat, turn, max_context_tokens)
        follow = _next_turn(e, turn + 1, request.order, max_new_tokens, max_context_tokens)
        reported.update()
        return follow

    requests = []
    for order, e in enumerate(flat):
        request = _next_turn(e, 0, order, max_new_tokens, max_context_tokens)
        if request is not None:
            requests.append(request)
    backend.generate_continuous(
        requests, on_finish, temperature=temperature, top_p=top_p, stop=stop, seed=generation_seed
    )
    reported.update(final=True)


def _next_turn(
    e: _Episode, turn: int, order: int, max_new_tokens: int, max_context_tokens: int
) -> Request | None:
    """The request for the episode's turn `turn` (from 0), within its budgets; None (and the episode over,
    `truncated`) when it has no turn or no context left; None for an episode already over."""
    if e.done:
        return None
    used = len(e.rollout.prompt_ids) + len(e.rollout.completion_ids)
    budget = min(max_new_tokens, max_context_tokens - used)
    if turn >= e.max_turns or budget < 1:
        e.done = True
        e.rollout.trajectory.status = "truncated"
        return None
    return Request(e.rollout.prompt_ids + e.rollout.completion_ids, budget, key=e, order=order)


class _Progress:
    """`progress(turn, groups done, groups)` as turns complete: `turn` is the turns every episode still
    going has taken (all of them at the end), reported each time it grows — once per turn when the backend
    schedules turns, the same when it schedules rows."""

    def __init__(self, episodes: list[list[_Episode]], progress: GenerationProgress | None) -> None:
        self.episodes = episodes
        self.progress = progress
        self.turn = 0

    def update(self, final: bool = False) -> None:
        if self.progress is None:
            return
        flat = [e for group in self.episodes for e in group]
        going = [len(e.rollout.finish_reasons) for e in flat if not e.done]
        turn = min(going) if going else max((len(e.rollout.finish_reasons) for e in flat), default=0)
        if turn > self.turn or (final and turn == self.turn == 0):
            self.turn = max(turn, 1)
            done = sum(all(e.done for e in group) for group in self.episodes)
            self.progress(self.turn, done, len(self.episodes))


def _advance(e: _Episode, completion: Any, chat: ChatFormat, turn: int, max_context_tokens: int) -> None:
    r = e.rollout
    traj = r.trajectory
    # The text as the episode's format reads it (harmony needs the control tokens a decoder drops).
    text = e.tool_format.completion_text(chat.tokenizer, list(completion.token_ids), completion.text)
    r.completion_ids += completion.token_ids
    r.loss_mask += [1] * len(completion.token_ids)
    r.behaviour_logprobs += list(completion.logprobs or [0.0] * len(completion.token_ids))
    r.finish_reasons.append(completion.finish_reason)
    assistant = Turn(
        role="assistant",
        text=text,
        token_ids=list(completion.token_ids),
        loss_mask=[1] * len(completion.token_ids),
    )
    traj.turns.append(assistant)
    try:
        result = e.env.step(text)
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
        assistant.tool_name, assistant.tool_args = tool_fields(text, e.tools, e.tool_format)
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
    role: Literal["tool", "user"] = "tool" if assistant.tool_name else "user"
    fmt = e.tool_format
    # What the template sees: the sampled message with its tool call, and the result as a tool
    # message tied to the call's id (native formats), or plain text (studio). Only the tokens after
    # the sampled ones are rendered: what the model sampled is never re-tokenized.
    call = None
    if role == "tool" and assistant.tool_args is not None:
        call = ToolCall(
            assistant.tool_name or "", assistant.tool_args, info.get("tool_call_id") or fmt.call_id(turn + 1)
        )
    message = fmt.tool_message(observation, call) if role == "tool" else None
    ids = chat.continuation(
        role,
        observation,
        ended_with_eos=completion.finish_reason == "eos",
        tools=e.tools,
        assistant=fmt.assistant_message(text, [call] if call else []),
        message=message,
        tool_format=fmt,
    )
    if len(r.prompt_ids) + len(r.completion_ids) + len(ids) >= max_context_tokens:
        e.done = True
        traj.status = "truncated"
        return
    r.completion_ids += ids
    r.loss_mask += [0] * len(ids)
    r.behaviour_logprobs += [0.0] * len(ids)
    traj.turns.append(
        Turn(
            role=role,
            text=observation,
            tool_name=assistant.tool_name if role == "tool" else None,
            tool_result=observation if role == "tool" else None,
            token_ids=ids,
            loss_mask=[0] * len(ids),
        )
    )
