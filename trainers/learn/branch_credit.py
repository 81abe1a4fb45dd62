"""The credit of a branched group's shared prefix (`branch_attribution`, ARPO's advantage attribution; the
tree comes from `trainers.rollout.branched`, each branch's `Rollout.branch` saying where it split off).

"soft" needs nothing here: plain GRPO over each full sequence already pushes a token shared by n samples
with all n advantages. "hard" gives each shared token the mean advantage of the samples that share it.
Plain Python: the trainer and the learner shards read `token_advantages` as per-turn credit sets them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def token_owners(group: Sequence[Any]) -> list[list[int]]:
    """For each rollout of a branched group, the sample that generated each of its completion tokens: a
    branch's tokens before its prefix length are its parent's (recursively), the rest its own. Two rollouts
    share token j exactly when their owners at j are the same sample."""
    by_sample = {r.sample: r for r in group}
    memo: dict[int, list[int]] = {}

    def owners(r: Any) -> list[int]:
        if r.sample in memo:
            return memo[r.sample]
        own = [r.sample] * len(r.completion_ids)
        branch = getattr(r, "branch", None) or {}
        parent = by_sample.get(branch.get("parent", -1))
        if parent is not None and parent.sample != r.sample:
            prefix = min(int(branch["prefix_tokens"]), len(own))
            own[:prefix] = owners(parent)[:prefix]
        memo[r.sample] = own
        return own

    return [owners(r) for r in group]


def hard_token_advantages(group: Sequence[Any]) -> None:
    """ "Hard" attribution: each token a branch shares with others gets the mean advantage (at that token)
    of every rollout that shares it; tokens only one rollout has keep its own. Sets `token_advantages`
    on the rollouts of a group that branched; a group without branches is left as it is."""
    if not any(getattr(r, "branch", None) for r in group):
        return
    owners = token_owners(group)
    values = [list(r.token_advantages or [r.advantage] * len(r.completion_ids)) for r in group]
    sums: dict[tuple[int, int], list[float]] = {}
    for own, vals in zip(owners, values, strict=True):
        for j, owner in enumerate(own):
            total = sums.setdefault((owner, j), [0.0, 0.0])
            total[0] += vals[j]
            total[1] += 1.0
    for r, own, vals in zip(group, owners, values, strict=True):
        shared = [sums[(owner, j)] for j, owner in enumerate(own)]
        r.token_advantages = [s[0] / s[1] if s[1] > 1 else vals[j] for j, s in enumerate(shared)]
