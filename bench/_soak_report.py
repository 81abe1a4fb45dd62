"""bench/soak.py's figures: latencies first vs last window, error answers, sent vs stored, each process's
memory and CPU over time, every run's final state beside the one it should have."""

from __future__ import annotations

GROWTH_LIMIT = 0.10  # goal: no process grows more than 10 % after its warm-up
FULL_WARMUP_S = 600.0  # the goal's "first ten minutes"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return (
        ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]
        if ordered
        else float("nan")
    )


def latency_table(record, duration: float) -> None:
    window = max(10.0, duration / 6)
    print(f"\nlatency, first {window:.0f} s vs last {window:.0f} s of the load (ms; n = samples)")
    print(f"  {'':32} {'first p50':>9} {'p99':>7} {'n':>6}   {'last p50':>9} {'p99':>7} {'n':>6}")
    names = sorted({(s.kind, s.name) for s in record.samples})
    for kind in ("page", "api", "live"):
        rows = [("all " + kind + ("s" if kind != "live" else " events"), None)]
        rows += [(name, name) for k, name in names if k == kind and kind != "live"]
        for label, name in rows:
            picked = [
                s
                for s in record.samples
                if s.kind == kind and (name is None or s.name == name) and 0 < s.status < 400
            ]
            first = [s.ms for s in picked if s.at < window]
            last = [s.ms for s in picked if s.at >= duration - window]
            print(
                f"  {label[:32]:32} {percentile(first, 50):9.1f} {percentile(first, 99):7.1f} {len(first):6}   "
                f"{percentile(last, 50):9.1f} {percentile(last, 99):7.1f} {len(last):6}"
            )


def error_answers(record) -> int:
    """Error answers outside the planned web restart (printed), and those during it (printed, not counted)."""
    outside, during, when = {}, {}, []
    for s in record.samples:
        if s.kind == "live" or 0 < s.status < 400:
            continue
        overlapped = record.in_outage(s.at, began=s.at - s.ms / 1000)
        bucket = during if overlapped else outside
        key = f"{s.name} → {s.status or 'no connection'}"
        bucket[key] = bucket.get(key, 0) + 1
        if not overlapped:
            when.append(f"{s.at - s.ms / 1000:.1f}–{s.at:.1f} s")
    total = sum(1 for s in record.samples if s.kind != "live")
    print(
        f"\nerror answers: {sum(outside.values())} of {total} requests outside the web restart"
        + (f" ({', '.join(f'{k} ×{n}' for k, n in sorted(outside.items()))})" if outside else "")
    )
    if when:  # to tell a burst (one cause) from errors spread over the load
        print(f"  when (sent–failed, s into the load): {', '.join(when[:20])}")
    if during:
        print(
            f"  during the restart (+5 s), not counted: {', '.join(f'{k} ×{n}' for k, n in sorted(during.items()))}"
        )
    if record.counters:
        print(f"  counters: {', '.join(f'{k} {n}' for k, n in sorted(record.counters.items()))}")
    return sum(outside.values())


def sent_vs_stored(trainers, seeded: dict) -> bool:
    from django.db.models import Count, Max

    from webapp.experiments.models import Run
    from webapp.rollouts.models import MetricPoint, RunEvent, Trajectory

    ok = True
    print("\nsent = stored")
    for t in trainers:
        points = MetricPoint.objects.filter(run_id=t.run_id).count()
        trajectories = Trajectory.objects.filter(run_id=t.run_id).count()
        same = (
            points == t.points
            and trajectories == t.trajectories
            and not t.stats.get("dropped")
            and not t.stats.get("rejected")
        )
        ok &= same and t.finished_ok
        print(
            f"  {t.name} (run {t.run_id}): metric points logged {t.points:,} stored {points:,}; trajectories logged "
            f"{t.trajectories:,} stored {trajectories:,}; SDK {t.stats}; finish delivered: {t.finished_ok}"
            f"  {'ok' if same and t.finished_ok else 'LOST OR REFUSED'}"
        )
    for run in Run.objects.filter(pk__in=seeded["runs"]).order_by("pk"):
        stored = RunEvent.objects.filter(run=run).aggregate(n=Count("seq"), top=Max("seq"))
        gap_free = (stored["n"] or 0) == (stored["top"] or 0)
        ok &= gap_free
        print(
            f"  training run {run.pk}: events stored {stored['n'] or 0:,}, highest seq {stored['top'] or 0:,}, last_seq "
            f"{run.last_seq:,} — {'gap-free' if gap_free else 'GAPS'}"
        )
    return ok


def peak_growth(points: list[tuple[float, int, float]], settled: float, *, window: float) -> float | None:
    """How much a process's peak resident memory rose from the first `window` seconds after `settled` to
    its last `window` seconds. Peaks, not single samples: a training worker swings by a gigabyte between
    generating and updating (2.1 → 3.1 GB in one step of the 135M model), so two samples taken in different
    phases read as growth or shrinkage that is neither; a leak raises the peak of every step. None when the
    process did not live through two windows after settling."""
    after = [p for p in points if p[0] >= settled]
    if not after or after[-1][0] - settled < 2 * window:
        return None
    first = max(rss for at, rss, _ in after if at <= settled + window)
    last = max(rss for at, rss, _ in after if at >= after[-1][0] - window)
    return last / first - 1 if first else None


def memory_table(samples: list[tuple[float, dict]], duration: float) -> list[str]:
    """Each process's memory at a few moments, and its growth after the warm-up; returns the flagged."""
    warmup = FULL_WARMUP_S if duration >= 2 * FULL_WARMUP_S else duration / 3
    print(
        f"\nresident memory (MiB) and CPU; growth = the peak of the last {warmup / 2:.0f} s vs the peak of the "
        f"{warmup / 2:.0f} s after {warmup:.0f} s into the process's life (goal ≤ 10 %)"
    )
    series: dict[tuple[str, int], list[tuple[float, int, float]]] = {}
    for at, sample in samples:
        for role, (generation, rss, cpu) in sample.items():
            series.setdefault((role, generation), []).append((at, rss, cpu))
    flagged = []
    marks = [0.0, duration / 3, 2 * duration / 3, duration]
    print(f"  {'process':34} " + " ".join(f"{m:>6.0f}s" for m in marks) + f" {'growth':>8} {'CPU cores':>9}")
    for (role, generation), points in sorted(series.items()):
        born = points[0][0]

        def at(t: float, points=points) -> str:
            near = [p for p in points if abs(p[0] - t) <= max(3.0, duration / 100)]
            return f"{near[0][1] / 2**20:7.0f}" if near else f"{'–':>7}"

        growth = peak_growth(points, born + warmup, window=warmup / 2)
        busy = points[-1][0] - born
        cores = (points[-1][2] - points[0][2]) / busy if busy > 0 else 0.0
        label = f"{role}" + (f" (#{generation})" if generation > 1 else "")
        shown = f"{growth * 100:+7.1f}%" if growth is not None else f"{'–':>8}"
        flag = growth is not None and growth > GROWTH_LIMIT and "bytes" not in role
        print(
            f"  {label[:34]:34} "
            + " ".join(at(m) for m in marks)
            + f" {shown} {cores:9.2f}"
            + ("  GROWS" if flag else "")
        )
        if flag:
            flagged.append(label)
    return flagged


def run_states(seeded: dict, trainers, timeline: dict, ended: dict) -> bool:
    """Each run's final state beside the state it should have: LOST for the run of the killed worker,
    SUCCEEDED for one that reached its last step, CANCELLED for one the bench cancelled, SUCCEEDED for the
    external trainers (they finished)."""
    from webapp.experiments.models import Run

    ok = True
    print("\nruns")
    external = {t.run_id for t in trainers}
    for run in Run.objects.filter(pk__in=ended["every"]).order_by("pk"):
        if run.pk == timeline["killed_run"]:
            should = "LOST"
        elif run.pk in external:
            should = "SUCCEEDED"
        elif run.pk in ended["cancelled"]:
            should = "CANCELLED"
        else:
            should = (
                "SUCCEEDED" if run.current_step >= run.resolved_config.get("max_steps", 0) else "(unfinished)"
            )
        right = run.status == should or (
            should == "CANCELLED"
            and run.status == "SUCCEEDED"
            and run.current_step >= run.resolved_config.get("max_steps", 0)
        )
        ok &= right
        print(
            f"  {run.name:14} run {run.pk}: {run.status:9} at step {run.current_step:5}  should be {should}  {'ok' if right else 'WRONG'}"
        )
    return ok


def report(args, record, trainers, watches, seeded: dict, timeline: dict, ended: dict) -> bool:
    latency_table(record, args.duration)
    live = [s.ms for s in record.samples if s.kind == "live"]
    print(
        f"  live: {sum(w.events for w in watches):,} events to {len(watches)} subscribers, {sum(w.gaps for w in watches)} "
        f"gaps resumed, {sum(w.reconnects for w in watches)} reconnects; whole-load p99 {percentile(live, 99):.1f} ms"
    )
    errors = error_answers(record)
    stored_ok = sent_vs_stored(trainers, seeded)
    flagged = memory_table(timeline["samples"], args.duration)
    states_ok = run_states(seeded, trainers, timeline, ended)
    problems = [
        p
        for p, bad in [
            ("error answers", errors),
            ("lost events", not stored_ok),
            ("wrong run states", not states_ok),
        ]
        if bad
    ]
    print(
        f"\nRESULT {'ok' if not problems else 'PROBLEMS: ' + ', '.join(problems)}; growing > 10 %: "
        f"{', '.join(flagged) or 'none'}"
        + (
            ""
            if args.duration >= 2 * FULL_WARMUP_S
            else " (a short soak: growth after a third of it, not after ten minutes)"
        )
    )
    return not problems
