"""Sessions: the calls of one agent episode, recorded as the exact token sequence the learner trains on.

A session keeps a running token sequence, laid out exactly as `trainers.rollout.generate_rollouts`
lays out an environment's episode:

- the first call's messages are rendered with the model's chat template (`ChatFormat.prompt`: the
  system message with the tools, earlier messages as few-shot examples, the last user message and
  the assistant header) — loss mask 0;
- the sampled tokens are appended as they were sampled (never re-tokenised) — loss mask 1, with the
  sampler's log-probs;
- a later call that continues the conversation (its messages are the previous call's messages, the
  reply it got, then new tool results or user messages) appends only the new messages, rendered by
  `ChatFormat.continuation_messages` (the end of the assistant message, the tool results, the next
  assistant header) — loss mask 0.

A call that does not continue the conversation (the agent rewrote or summarised its history, or
changed its tools) starts a new segment. The episode trains on its last segment; the earlier ones stay
in the trajectory as turns without tokens, for review (`info["segments"]` counts them).

The tool-call format is the run's (`trainers.rollout.toolformats`): with the studio format the tools are
described in the system message (unless the agent's own system message already shows the call
syntax), with a native format the chat template renders them; calls the model writes come back as
OpenAI `tool_calls`, and the agent's tool messages go back to the model as the format's tool messages.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from trainers.gateway.protocol import ApiError, ChatRequest, Message, Reply
from trainers.rollout.chat import ChatFormat
from trainers.rollout.episodes import Rollout, tool_fields
from trainers.rollout.toolcalls import TOOL_CALL_OPEN
from trainers.rollout.toolformats import ToolFormat
from trainers.types import Task, ToolCall, ToolSpec, Trajectory, Turn, model_turns

OUTCOMES = ("ok", "truncated", "error")


@dataclass
class Segment:
    """One token sequence: a first prompt and everything appended to it."""

    tools: list[ToolSpec]
    tools_key: str
    prompt_ids: list[int]
    turns: list[Turn]
    examples: list[dict[str, Any]] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    conversation: list[Message] = field(default_factory=list)  # the last request's messages + its reply
    ours: dict[int, tuple[str, str]] = field(default_factory=dict)  # reply index → (content sent, raw text)
    calls_by_id: dict[str, ToolCall] = field(default_factory=dict)
    last_assistant: dict[str, Any] | None = None  # the last sampled message as the template sees it
    last_finish: str = ""

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)

    def continued_by(self, request: ChatRequest) -> bool:
        """Whether `request` is this conversation plus new messages (our replies echoed back)."""
        if request.tools_key() != self.tools_key or len(request.messages) <= len(self.conversation):
            return False
        for index, mine in enumerate(self.conversation):
            theirs = request.messages[index]
            if index in self.ours:
                sent, raw = self.ours[index]
                if (
                    theirs.role != "assistant"
                    or theirs.content not in ("", sent, raw)
                    or Message("assistant", "", theirs.tool_calls).key()
                    != Message("assistant", "", mine.tool_calls).key()
                ):
                    return False
            elif theirs.key() != mine.key():
                return False
        return True


@dataclass
class Plan:
    """A call before sampling: the tokens to continue from and the turns the new messages add."""

    segment: Segment
    new_segment: bool
    new_turns: list[Turn]
    context: list[int]


class Session:
    """One episode of an agent: its calls, reward and outcome. Thread-safe; one call at a time."""

    def __init__(
        self,
        session_id: str,
        task: Task,
        *,
        policy_version: int,
        max_turns: int,
        temperature: float | None = None,
        top_p: float | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.id = session_id
        self.task = task
        self.policy_version = policy_version
        self.max_turns = max_turns  # model calls allowed (0 = no limit)
        self.temperature, self.top_p = temperature, top_p  # fixed by a training run; None = the request's
        self.metadata = dict(metadata or {})
        self.created = time.time()
        self.lock = threading.Lock()  # guards the fields below
        self.call_lock = threading.Lock()  # serialises this session's calls: each extends the last
        self.open = True
        self.outcome: str | None = None  # set by end() or by a limit (truncated)
        self.error: str | None = None
        self.reward: float | None = None
        self.info: dict[str, Any] = {}
        self.segments: list[Segment] = []
        self.calls = 0
        self.in_flight = False

    # -- what the session API shows ----------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        with self.lock:
            segment = self.segments[-1] if self.segments else None
            return {
                "session_id": self.id,
                "status": "open" if self.open else "finished",
                "outcome": self.outcome,
                "task_id": self.task.id,
                "calls": self.calls,
                "reward": self.reward,
                "error": self.error,
                "policy_version": self.policy_version,
                "prompt_tokens": len(segment.prompt_ids) if segment else 0,
                "completion_tokens": sum(segment.loss_mask) if segment else 0,
                "segments": len(self.segments),
            }

    def set_reward(self, reward: float | None, info: dict[str, Any] | None = None) -> None:
        """The episode's reward (None keeps the current one) and facts about it for the trajectory's
        info ("correct" feeds the accuracy metric)."""
        with self.lock:
            if reward is not None:
                self.reward = float(reward)
            self.info.update(info or {})

    def finish(self, outcome: str | None = None, error: str | None = None) -> bool:
        """End the episode (idempotent: False when it had already ended). Without an outcome it is
        `ok`, or `truncated` when a limit cut it short or its last message ran out of tokens."""
        with self.lock:
            if not self.open:
                return False
            self.open = False
            if outcome == "error" or error:
                self.outcome, self.error = "error", error or self.error or "the agent reported an error"
            elif outcome is not None:
                self.outcome = outcome
            elif self.outcome is None:
                last = self.segments[-1].last_finish if self.segments else ""
                self.outcome = "truncated" if last == "length" else "ok"
            return True

    def truncate(self, reason: str) -> None:
        with self.lock:
            self.outcome = "truncated"
            self.info.setdefault("truncated", reason)

    # -- the token sequence --------------------------------------------------------------------------

    def plan(self, request: ChatRequest, chat: ChatFormat, fmt: ToolFormat) -> Plan:
        """The tokens this call continues from. Raises ApiError for a call the episode cannot take."""
        with self.lock:
            segment = self.segments[-1] if self.segments else None
        if segment is not None and segment.continued_by(request):
            new = request.messages[len(segment.conversation) :]
            pieces = chat.continuation_messages(
                [template_message(m, segment.calls_by_id, fmt) for m in new],
                ended_with_eos=segment.last_finish == "eos",
                tools=segment.tools,
                assistant=segment.last_assistant,
                tool_format=fmt,
            )
            attempted = next((t.tool_name for t in reversed(segment.turns) if t.role == "assistant"), None)
            turns = [
                _turn(m, ids, segment.calls_by_id, attempted) for m, ids in zip(new, pieces, strict=True)
            ]
            context = segment.prompt_ids + segment.completion_ids + [t for ids in pieces for t in ids]
            return Plan(segment, False, turns, context)
        return self._first_prompt(request, chat, fmt)

    def _first_prompt(self, request: ChatRequest, chat: ChatFormat, fmt: ToolFormat) -> Plan:
        messages, tools = list(request.messages), request.tools
        system = messages.pop(0).content if messages and messages[0].role == "system" else None
        if tools and not fmt.native and TOOL_CALL_OPEN not in (system or ""):
            # The studio format shows the tools in the system message (a native template renders them);
            # an agent whose own prompt already teaches the call syntax is not told twice.
            section = fmt.tools_prompt(tools)
            system = f"{system}\n\n{section}" if system else section
        calls_by_id: dict[str, ToolCall] = {}
        template = [template_message(m, calls_by_id, fmt) for m in messages]
        segment = Segment(tools=list(tools), tools_key=request.tools_key(), prompt_ids=[], turns=[])
        segment.calls_by_id = calls_by_id
        if system is not None and messages[-1].role == "user":
            # The shape of an environment's episode: exactly the tokens `generate_rollouts` makes.
            segment.examples = template[:-1]
            system_ids, user_ids = chat.prompt(
                system, messages[-1].content, segment.examples, tools=tools, tool_format=fmt
            )
            segment.turns = [
                Turn("system", system, token_ids=system_ids, loss_mask=[0] * len(system_ids)),
                Turn("user", messages[-1].content, token_ids=user_ids, loss_mask=[0] * len(user_ids)),
            ]
            segment.prompt_ids = system_ids + user_ids
        else:
            head = [{"role": "system", "content": system}] if system is not None else []
            ids = chat.encode(chat.render([*head, *template], True, fmt.template_tools(list(tools))))
            turns = ([Turn("system", system)] if system is not None else []) + [
                _turn(m, [], calls_by_id) for m in messages
            ]
            turns[-1].token_ids, turns[-1].loss_mask = ids, [0] * len(ids)
            for turn in turns[:-1]:
                turn.token_ids, turn.loss_mask = [], []
            segment.turns, segment.prompt_ids = turns, ids
        return Plan(segment, True, [], list(segment.prompt_ids))

    def record(
        self, plan: Plan, request: ChatRequest, completion: Any, chat: ChatFormat, fmt: ToolFormat
    ) -> Reply:
        """Append what was sampled; the reply to send. Raises ApiError when the session ended meanwhile."""
        segment = plan.segment
        with self.lock:
            if not self.open:
                raise session_finished(self.id)
            self.calls += 1
            turn_number = self.calls
            if plan.new_segment:
                if self.segments:
                    self.info["segments"] = len(self.segments) + 1
                self.segments.append(segment)
            else:
                for turn in plan.new_turns:
                    segment.turns.append(turn)
                    segment.completion_ids += turn.token_ids or []
                    segment.loss_mask += [0] * len(turn.token_ids or [])
                    segment.logprobs += [0.0] * len(turn.token_ids or [])
            ids = list(completion.token_ids)
            segment.completion_ids += ids
            segment.loss_mask += [1] * len(ids)
            segment.logprobs += list(completion.logprobs or [0.0] * len(ids))
            segment.finish_reasons.append(completion.finish_reason)
            segment.last_finish = completion.finish_reason
            text = completion.text
            assistant = Turn("assistant", text, token_ids=ids, loss_mask=[1] * len(ids))
            calls: list[ToolCall] = []
            if request.tools:
                assistant.tool_name, assistant.tool_args = tool_fields(text, request.tools, fmt)
                parsed = fmt.parse(text, request.tools) if assistant.tool_name else []
                calls = list(parsed) if isinstance(parsed, list) else []
                for i, call in enumerate(calls):
                    # Ids as an environment numbers them (`call_id(turn)`), so the tokens match its episodes.
                    call.id = call.id or fmt.call_id(turn_number if i == 0 else 1000 * turn_number + i)
                    segment.calls_by_id[call.id] = call
            segment.turns.append(assistant)
            segment.last_assistant = fmt.assistant_message(text, calls)
            content = _prose(text) if calls else text
            segment.conversation = [*request.messages, Message("assistant", content or "", calls)]
            segment.ours = {i: v for i, v in segment.ours.items() if i < len(request.messages)}
            segment.ours[len(request.messages)] = (content or "", text)
            finish = "tool_calls" if calls else ("length" if completion.finish_reason == "length" else "stop")
            return Reply(
                content=content,
                tool_calls=calls,
                finish_reason=finish,
                prompt_ids=list(plan.context),
                completion_ids=ids,
                logprobs=list(completion.logprobs or [0.0] * len(ids)),
                tokens=[],
            )

    # -- the episode as a rollout --------------------------------------------------------------------

    def to_rollout(self, *, group: int, sample: int, seed: int, split: str) -> Rollout:
        """The episode as the learner and the rubric take it (after `finish`)."""
        with self.lock:
            segment = self.segments[-1] if self.segments else None
            turns: list[Turn] = []
            for earlier in self.segments[:-1]:  # shown, not trained: their tokens are another sequence
                turns += [
                    Turn(t.role, t.text, t.tool_name, t.tool_args, t.tool_result) for t in earlier.turns
                ]
            turns += list(segment.turns) if segment else []
            info: dict[str, Any] = {k: v for k, v in self.info.items() if k not in ("turns",)}
            info["turns"] = model_turns(turns)
            info["calls"] = self.calls
            if segment is not None and segment.examples:
                info["prompt_examples"] = segment.examples
            if self.error:
                info["error"] = self.error
            trajectory = Trajectory(
                task=self.task,
                turns=turns,
                status=self.outcome or "ok",  # type: ignore[arg-type]
                env_reward=float(self.reward or 0.0),
                info=info,
            )
            env_state: dict[str, Any] = {
                "session_id": self.id,
                "calls": self.calls,
                "segments": len(self.segments),
            }
            if self.error:
                env_state["error"] = self.error
            if self.reward is not None:
                env_state["agent_reward"] = self.reward
            return Rollout(
                group=group,
                sample=sample,
                task=self.task,
                seed=seed,
                trajectory=trajectory,
                prompt_ids=list(segment.prompt_ids) if segment else [],
                completion_ids=list(segment.completion_ids) if segment else [],
                loss_mask=list(segment.loss_mask) if segment else [],
                behaviour_logprobs=list(segment.logprobs) if segment else [],
                finish_reasons=list(segment.finish_reasons) if segment else [],
                env_state=env_state,
                policy_version=self.policy_version,
                split=split,
            )


def template_message(message: Message, calls_by_id: dict[str, ToolCall], fmt: ToolFormat) -> dict[str, Any]:
    """An OpenAI message as the chat template takes it in the run's tool format (the same dicts an
    environment's episode renders: `fmt.assistant_message`, `fmt.tool_message`)."""
    if message.role == "assistant":
        calls = [
            ToolCall(c.name, c.arguments, c.id or fmt.call_id(i + 1))
            for i, c in enumerate(message.tool_calls)
        ]
        for call in calls:
            calls_by_id[call.id or ""] = call
        text = message.content
        if calls and not fmt.native:  # the studio format has no tool_calls field: the call is text
            text += "".join(fmt.call_text(c) for c in calls)
        return fmt.assistant_message(text, calls)
    if message.role == "tool":
        answered = calls_by_id.get(message.tool_call_id or "")
        if answered is not None:
            return fmt.tool_message(message.content, answered)
        # A result for no call the model made (it wrote a malformed one): as an episode renders it.
        rendered = fmt.tool_message(message.content, None)
        if "tool_call_id" in rendered:
            rendered["tool_call_id"] = message.tool_call_id
        return rendered
    return {"role": message.role, "content": message.content}


def _turn(
    message: Message, ids: list[int], calls_by_id: dict[str, ToolCall], attempted: str | None = None
) -> Turn:
    """The trajectory turn of an agent's message. A tool result for no call the model made answers
    the call it tried to write (`attempted`: the last assistant turn's tool name, "invalid" if any)."""
    turn = Turn(message.role, message.content, token_ids=list(ids), loss_mask=[0] * len(ids))  # type: ignore[arg-type]
    if message.role == "tool":
        call = calls_by_id.get(message.tool_call_id or "")
        turn.tool_name, turn.tool_result = (call.name if call else attempted), message.content
    elif message.role == "assistant" and message.tool_calls:
        turn.tool_name, turn.tool_args = message.tool_calls[0].name, message.tool_calls[0].arguments
    return turn


def _prose(text: str) -> str | None:
    """The words before a tool call (the content OpenAI sends beside `tool_calls`), if any."""
    before = text.split(TOOL_CALL_OPEN, 1)[0] if TOOL_CALL_OPEN in text else ""
    return before.strip() or None


def session_not_found(session_id: str) -> ApiError:
    return ApiError(
        404,
        f"No session {session_id!r}: start one with POST /v1/sessions.",
        code="session_not_found",
        type_="not_found_error",
    )


def session_finished(session_id: str) -> ApiError:
    return ApiError(
        409, f"Session {session_id!r} has ended; it takes no more calls.", code="session_finished"
    )


def error_text(exc: BaseException) -> str:
    """An exception as one line for a trajectory: `Type: message`."""
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
