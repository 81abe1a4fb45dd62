"""Branching rollouts (`rollout_strategy: branching`): a group's episodes as a tree, the rules of
`trainers.learn.branching` (ARPO, AEPO) deciding where it branches.

The loop is `trainers.rollout.episodes`' turn loop with a budget per group: all active paths of all groups
take a turn together (one batched call per token budget); the backend returns the entropy of each turn's
first k tokens. A path's first answer sets its initial entropy; a turn that follows a tool result is
compared with it, and a branch point copies the path as it stood before that turn — its tokens, its
trajectory and its environment (`fork_environment`) — into new paths that sample that turn afresh on the
next round. When a group's paths are all done and budget is left, the rest start as global samples.

Each branch records where it came from in `Rollout.branch`: its parent's sample index, the completion
tokens it shares with the parent (`prefix_tokens`), the index of its first own turn (`turn`), the entropy
that made the branch (`entropy`, `initial_entropy`, `rise`). Global samples have `branch` None.
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainers.rollout import branching
from trainers.rollout.backends.base import GenerationBackend
from trainers.rollout.chat import ChatFormat
from trainers.rollout.episodes import (
    GenerationProgress,
    Rollout,
    _advance,
    _Episode,
    _finish_episode,
    _start_episode,
    generate_rollouts,
)
from trainers.sdk.cancel import check_cancel
from trainers.types import Task

log = logging.getLogger(__name__)


@dataclass
class _Path:
    """One episode of the tree and what branching needs to know about it."""

    episode: _Episode
    turns: int = 0  # model turns taken
    after_tool: bool = False  # the last thing added was a tool result: the next turn is a branch candidate
    initial_entropy: float | None = None
    consecutive: int = 0  # branch points in a row on this path (AEPO's penalty)


@dataclass
class _Group:
    index: int
    task: Task
    seeds: Sequence[int]
    rng: random.Random
    paths: list[_Path] = field(default_factory=list)
    global_target: int = 0  # global samples this group starts (M, or AEPO's split once measured)
    globals_started: int = 0
    split_done: bool = False

    @property
    def size(self) -> int:
        return len(self.seeds)

    @property
    def left(self) -> int:
        return self.size - len(self.paths)


def fork_environment(env: Any, make_env: Callable[[], Any], task: Task, seed: int, texts: list[str]) -> Any:
    """The environment as it stands for a new branch: its `fork()` when it has one, else a deep copy; an
    environment that cannot be copied (a live connection) is rebuilt by replaying the path's answers on a
    fresh one (deterministic environments end in the same state)."""
    fork = getattr(env, "fork", None)
    if callable(fork):
        return fork()
    try:
        return copy.deepcopy(env)
    except Exception:  # noqa: BLE001 — sockets, locks, generators: replay instead
        fresh = make_env()
        fresh.reset(task, seed)
        for text in texts:
            fresh.step(text)
        return fresh


def generate_branching_rollouts(
    backend: GenerationBackend,
    chat: ChatFormat,
    make_env: Callable[[], Any],
    tasks: Sequence[Task],
    seeds: Sequence[Sequence[int]],
    *,
    config: Any,
    monitor: branching.EntropyMonitor,
    max_turns: int,
    max_new_tokens: int,
    max_context_tokens: int,
    temperature: float,
    top_p: float,
    generation_seed: int | None,
    stop: Sequence[str],
    policy_version: int = 0,
    split: str = "train",
    first_group: int = 0,
    progress: GenerationProgress | None = None,
) -> list[list[Rollout]]:
    """`generate_rollouts`' groups, each grown as a tree within its `len(seeds[i])` budget (module
    docstring). `config` has the branching knobs (`trainers.run_config.RunConfig`); `monitor` keeps the
    entropy after tool results across calls (AEPO's pre-monitoring). An environment that drives the model
    itself (the `agent` kind) cannot be branched: its groups are generated independently."""
    probe = make_env() if any(seeds) else None
    if probe is not None and getattr(probe, "drive_rollouts", None) is not None:
        log.warning(
            "rollout_strategy branching: this environment drives its own episodes; sampling independently"
        )
        return generate_rollouts(
            backend, chat, lambda: probe, tasks, seeds, max_turns=max_turns, max_new_tokens=max_new_tokens,
            max_context_tokens=max_context_tokens, temperature=temperature, top_p=top_p,
            generation_seed=generation_seed, stop=stop, policy_version=policy_version, split=split,
            first_group=first_group, progress=progress,
        )  # fmt: skip
    spare = [probe]
    tree = _Tree(chat, make_env, spare, config, monitor, max_turns, policy_version, split)
    base = 0 if generation_seed is None else generation_seed
    groups = [
        _Group(first_group + g, task, list(group_seeds), random.Random(base * 31 + first_group + g))
        for g, (task, group_seeds) in enumerate(zip(tasks, seeds, strict=True))
    ]
    least = max(1, min(g.size for g in groups) // 4) if groups else 1
    for group in groups:
        m = branching.initial_samples(group.size, config.branch_initial_samples)
        group.global_target = least if config.branch_budget_split == "entropy" else m
        tree.start_globals(group, group.global_target)
    with backend.session():
        tree.take_turns(
            backend,
            groups,
            max_new_tokens=max_new_tokens,
            max_context_tokens=max_context_tokens,
            temperature=temperature,
            top_p=top_p,
            generation_seed=generation_seed,
            stop=stop,
            progress=progress,
        )
    out = []
    for group in groups:
        for path in group.paths:
            _finish_episode(path.episode)
        out.append(sorted((p.episode.rollout for p in group.paths), key=lambda r: r.sample))
    return out


class _Tree:
    """The groups' paths and the rules that grow them (one call of `generate_branching_rollouts`)."""

    def __init__(
        self,
        chat: ChatFormat,
        make_env: Callable[[], Any],
        spare: list[Any],
        config: Any,
        monitor: branching.EntropyMonitor,
        max_turns: int,
        policy_version: int,
        split: str,
    ) -> None:
        self.chat, self.make_env, self.spare = chat, make_env, spare
        self.config, self.monitor = config, monitor
        self.max_turns, self.policy_version, self.split = max_turns, policy_version, split
        self.window = config.branch_entropy_tokens

    def _env(self) -> Any:
        env = self.spare.pop() if self.spare else None
        return env if env is not None else self.make_env()

    def start_globals(self, group: _Group, count: int) -> None:
        """Start `count` more global samples of `group` (at most its budget left)."""
        for _ in range(min(count, group.left)):
            sample = len(group.paths)
            episode = _start_episode(
                self._env(),
                self.chat,
                group.task,
                group.seeds[sample],
                group.index,
                sample,
                self.max_turns,
                self.policy_version,
                self.split,
            )
            group.paths.append(_Path(episode))
            group.globals_started += 1

    def branch(self, group: _Group, path: _Path, decision: branching.BranchDecision, entropy: float) -> None:
        """Copy `path` as it stands (before the turn just sampled) into `branch_factor` − 1 new paths."""
        parent = path.episode
        texts = [t.text for t in parent.rollout.trajectory.turns if t.role == "assistant"]
        for _ in range(min(self.config.branch_factor - 1, group.left)):
            rollout = copy.deepcopy(parent.rollout)
            rollout.sample = len(group.paths)
            rollout.branch = {
                "parent": parent.rollout.sample,
                "prefix_tokens": len(parent.rollout.completion_ids),
                "turn": len(parent.rollout.trajectory.turns),
                "entropy": round(entropy, 4),
                "initial_entropy": round(path.initial_entropy or 0.0, 4),
                "rise": round(decision.rise, 4),
                "probability": round(decision.probability, 4),
            }
            env = fork_environment(parent.env, self.make_env, group.task, rollout.seed, texts)
            episode = _Episode(env, rollout, parent.max_turns, parent.tool_format)
            group.paths.append(_Path(episode, path.turns, False, path.initial_entropy, path.consecutive))

    def observe(self, group: _Group, path: _Path, completion: Any) -> None:
        """What the turn just sampled says, before the environment sees it: the initial entropy, or at a
        tool step a branch decision (and AEPO's budget split after the group's first answers)."""
        entropy = branching.mean_entropy(completion.entropies, self.window)
        if entropy is None:
            return
        if path.turns == 0:
            if path.initial_entropy is None:
                path.initial_entropy = entropy
            return
        if not path.after_tool:
            return
        self.monitor.observe(entropy)
        if group.left <= 0 or path.initial_entropy is None:
            return
        decision = branching.branch_decision(
            self.config, group.rng, entropy, path.initial_entropy, path.consecutive
        )
        if decision.branch:
            path.consecutive += 1
            self.branch(group, path, decision, entropy)
        else:
            path.consecutive = 0

    def presplit(self, group: _Group) -> None:
        """AEPO's pre-monitoring: once the first global samples have answered, start the rest of the
        global share (`branching.global_share`)."""
        if group.split_done or self.config.branch_budget_split != "entropy":
            return
        roots = [p.initial_entropy for p in group.paths if p.episode.rollout.branch is None]
        if not roots or any(e is None for e in roots):
            return
        group.split_done = True
        root = sum(e for e in roots if e is not None) / len(roots)
        target = branching.global_share(group.size, root, self.monitor.tool_entropy, group.globals_started)
        group.global_target = target
        self.start_globals(group, target - group.globals_started)

    def take_turns(
        self,
        backend: GenerationBackend,
        groups: list[_Group],
        *,
        max_new_tokens: int,
        max_context_tokens: int,
        temperature: float,
        top_p: float,
        generation_seed: int | None,
        stop: Sequence[str],
        progress: GenerationProgress | None,
    ) -> None:
        round_ = 0
        while True:
            check_cancel()
            for group in groups:
                if group.left > 0 and all(p.episode.done for p in group.paths):
                    self.start_globals(group, group.left)  # what branching left unspent
            batch = self._ready(groups, max_new_tokens, max_context_tokens)
            if not batch:
                break
            for budget, members in sorted(batch.items()):
                check_cancel()
                turn_seed = None if generation_seed is None else generation_seed + 7919 * round_ + budget
                completions = backend.generate(
                    [m[1].episode.rollout.prompt_ids + m[1].episode.rollout.completion_ids for m in members],
                    n=1,
                    max_new_tokens=budget,
                    temperature=temperature,
                    top_p=top_p,
                    stop=stop,
                    seed=turn_seed,
                    entropy_tokens=self.window,
                )
                for (group, path), completion in zip(members, completions, strict=True):
                    self.observe(group, path, completion)
                    _advance(path.episode, completion, self.chat, path.turns, max_context_tokens)
                    path.turns += 1
                    turns = path.episode.rollout.trajectory.turns
                    path.after_tool = not path.episode.done and turns[-1].role == "tool"
            for group in groups:
                self.presplit(group)
            round_ += 1
            if progress is not None:
                done = sum(all(p.episode.done for p in g.paths) and g.left == 0 for g in groups)
                progress(round_, done, len(groups))

    def _ready(
        self, groups: list[_Group], max_new_tokens: int, max_context_tokens: int
    ) -> dict[int, list[tuple[_Group, _Path]]]:
        """The paths that take a turn now, by token budget; paths out of turns or context end truncated."""
        by_budget: dict[int, list[tuple[_Group, _Path]]] = {}
        for group in groups:
            for path in group.paths:
                e = path.episode
                if e.done:
                    continue
                used = len(e.rollout.prompt_ids) + len(e.rollout.completion_ids)
                budget = min(max_new_tokens, max_context_tokens - used)
                if path.turns >= e.max_turns or budget < 1:
                    e.done = True
                    e.rollout.trajectory.status = "truncated"
                    continue
                by_budget.setdefault(budget, []).append((group, path))
        return by_budget


class BranchingRollouts:
    """The built-in `branching` rollout strategy (`trainers.parts`): ARPO/AEPO's trees for training groups,
    independent samples for held-out evaluation. It keeps AEPO's running entropy after tool results
    (`branching.EntropyMonitor`) across the steps of its process (the trainer's, or a Ray rollout worker's)."""

    def __init__(self, config: Any, options: dict[str, Any]) -> None:
        self.config = config
        self.monitor = branching.EntropyMonitor()

    def generate(self, *args: Any, split: str = "train", **kwargs: Any) -> list[list[Rollout]]:
        if split == "train":
            return generate_branching_rollouts(
                *args, config=self.config, monitor=self.monitor, split=split, **kwargs
            )
        return generate_rollouts(*args, split=split, **kwargs)
