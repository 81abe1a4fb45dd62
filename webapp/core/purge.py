"""Deleting a row that owns millions (a run, a project) without locking the dashboard: its dependants go
first, table by table, deepest first, in short transactions (each table's batches sized to ~0.2 s).

Django's own `delete()` of such a row collects every dependant into memory and deletes them in one
transaction: for a long run (millions of turns and metric chunks) that is gigabytes and minutes of locks.
Here each transaction deletes one batch of one table whose own dependants are already gone, so Django's
collector has only the batch's `SET_NULL` links and small leftovers to handle. Which tables hold a row's
dependants is read from the models' foreign keys (`deletion_plan`): a table added later is covered without
a list to keep. A model whose rows own files on disk (a run's checkpoints, a reward model) says which with a
classmethod `owned_files(pks) -> list[Path]`; they are removed once the batch's rows are gone.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from django.db import models, transaction

BATCH_ROWS = 2000  # at most, a batch
FIRST_BATCH_ROWS, MIN_BATCH_ROWS = 100, 20
BATCH_TARGET_S = 0.2  # what a batch's transaction should take: the longest a row lock is held, about


@dataclass(frozen=True)
class PlanStep:
    """Delete the rows of `model` whose `lookup` is the root's primary key."""

    model: type[models.Model]
    lookup: str


@cache
def deletion_plan(root: type[models.Model]) -> tuple[PlanStep, ...]:
    """The tables whose rows belong to a `root` row through CASCADE (or DO_NOTHING) foreign keys, each
    before the tables it points at (`_in_dependency_order`). `SET_NULL` and `PROTECT` links are not
    followed: the collector nulls the first batch by batch; a row the plan does not own that PROTECTs one
    it does stops the purge with Django's ProtectedError (that is what PROTECT is for)."""
    steps: list[PlanStep] = []

    def walk(model: type[models.Model], path: str, seen: frozenset[type[models.Model]]) -> None:
        # Hidden relations too (related_name="+": a run's metric tiles), as Django's own collector reads them.
        relations = [
            f for f in model._meta.get_fields(include_hidden=True) if f.auto_created and not f.concrete
        ]
        for rel in relations:
            if rel.many_to_many or rel.on_delete not in (models.CASCADE, models.DO_NOTHING):
                continue  # m2m rows go with each batch's delete(); SET_NULL/PROTECT: see above
            child = rel.related_model
            if not child._meta.managed:  # a view over other tables (MetricPoint unnests MetricChunk)
                continue
            if child in seen:  # a self-reference (a reply's parent comment): the same batch takes it
                continue
            lookup = f"{rel.field.name}__{path}" if path else rel.field.name
            walk(child, lookup, seen | {child})
            steps.append(PlanStep(child, lookup))

    walk(root, "", frozenset({root}))
    return tuple(_in_dependency_order(steps))


def _in_dependency_order(steps: list[PlanStep]) -> list[PlanStep]:
    """`steps` sorted so that every table is emptied before any table it points at with CASCADE (a turn
    before its trajectory: the walk's post-order) and before any it PROTECTs (a reward model before its
    preference snapshot, a run before its environment version, whose environment then follows it), keeping
    the walk's order where nothing constrains it."""

    def must_precede(first: type[models.Model], then: type[models.Model]) -> bool:
        return first is not then and any(
            f.is_relation
            and f.many_to_one
            and f.related_model is then
            and f.remote_field.on_delete in (models.CASCADE, models.PROTECT)
            for f in first._meta.get_fields()
        )

    waiting = {
        i: {j for j, other in enumerate(steps) if must_precede(other.model, step.model)}
        for i, step in enumerate(steps)
    }
    ordered: list[PlanStep] = []
    done: set[int] = set()
    while waiting:
        ready = min((i for i, before in waiting.items() if before <= done), default=None)
        if ready is None:
            raise RuntimeError(f"the deletion plan's foreign keys form a cycle: {sorted(waiting)}")
        ordered.append(steps[ready])
        done.add(ready)
        del waiting[ready]
    return ordered


# Called after each batch with (model, rows deleted, seconds its transaction took): a bench's measure.
BatchHook = Callable[[type[models.Model], int, float], None]


def purge(
    root: type[models.Model],
    pk: int,
    *,
    batch_rows: int = BATCH_ROWS,
    budget_s: float | None = None,
    on_batch: BatchHook | None = None,
) -> bool:
    """Delete the `root` row `pk` and everything that belongs to it, in batches; True when it is gone.

    With `budget_s`, stops after about that long (each batch finishes) and returns False: the caller
    (the periodic purge) comes back for the rest. Idempotent: a purge interrupted anywhere resumes."""
    deadline = None if budget_s is None else time.monotonic() + budget_s
    for step in deletion_plan(root):
        rows = step.model._base_manager.filter(**{step.lookup: pk})
        # A row's cost differs by table (a trajectory with its search index and TOAST ~1 ms on Postgres, a
        # turn a tenth of that): each table's batches are sized to take about BATCH_TARGET_S, starting small.
        size = min(batch_rows, FIRST_BATCH_ROWS)
        while ids := list(rows.values_list("pk", flat=True)[:size]):
            took = _delete(step.model, ids, on_batch)
            size = max(MIN_BATCH_ROWS, min(batch_rows, int(len(ids) * BATCH_TARGET_S / max(took, 1e-3))))
            if deadline is not None and time.monotonic() > deadline:
                return False
    _delete(root, [pk], on_batch)
    return True


def _delete(model: type[models.Model], ids: list[int], on_batch: BatchHook | None) -> float:
    """Delete the rows `ids` of `model` in one transaction; the seconds it took."""
    files = list(model.owned_files(ids)) if hasattr(model, "owned_files") else []
    started = time.perf_counter()
    with transaction.atomic():
        model._base_manager.filter(pk__in=ids).delete()
    took = time.perf_counter() - started
    if on_batch is not None:
        on_batch(model, len(ids), took)
    for path in files:  # after the commit: a rolled-back batch keeps its files
        shutil.rmtree(path, ignore_errors=True)
    return took


def directories_under(root: str | Path, paths: Iterable[str | Path]) -> list[Path]:
    """The `paths` that are directories inside `root`, the deployment's own place for such files: an
    `owned_files` answers with these, never a path a user gave (a model directory elsewhere)."""
    base = Path(root).resolve()
    found = []
    for path in paths:
        resolved = Path(path).resolve()
        if resolved != base and resolved.is_relative_to(base) and resolved.is_dir():
            found.append(resolved)
    return found
