"""What per-token statistics (`token_stats`, trainers/sdk/wire_trajectory.py:TOKEN_STATS) cost: bytes per token on the
wire and in Postgres, and the ingestion rate with them on vs off.

Real pieces, as bench/ingest.py runs them (its server, runs and posters are reused): the dashboard under
daphne on Postgres + Redis, fed through `POST /api/runs/<id>/events` by CLIENTS concurrent posters. Each
request is one `trajectories` event of 8 groups × 8 samples of bench/ingest.py's 6-turn agent episode,
with its two model turns grown to TOKENS tokens each (token ids and loss mask: what a trainer sends
anyway). "on" adds the five packed arrays the built-in trainer sends (log-prob, entropy, advantage, gap,
text lengths); "off" is the same body without them. Phases alternate (off, on) for ROUNDS rounds; the
rates are the medians. Stored bytes are Postgres's own (`pg_column_size`, after TOAST compression) of
the turn rows each run wrote.

Environment: as bench/ingest.py (DATABASE_URL, REDIS_URL, INGEST_BENCH_CLIENTS, INGEST_BENCH_SECONDS,
INGEST_BENCH_ROUNDS), TOKEN_BENCH_TOKENS (256 per model turn).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _postgres, ingest  # noqa: E402  (ingest sets the bench's environment defaults)
from bench._measure import size  # noqa: E402
from trainers.sdk import wire  # noqa: E402

TOKENS = size(int(os.environ.get("TOKEN_BENCH_TOKENS", "256")), smoke=16)
GROUPS, SAMPLES = ingest.GROUPS, ingest.SAMPLES


def _stats(rng: random.Random, n: int, advantage: float) -> dict[str, str]:
    return {
        "logprob": wire.pack_halves(-rng.expovariate(2.0) for _ in range(n)),
        "entropy": wire.pack_halves(rng.uniform(0, 3) for _ in range(n)),
        "advantage": wire.pack_halves([advantage] * n),
        "gap": wire.pack_halves(rng.gauss(0, 0.01) for _ in range(n)),
        "text_lengths": wire.pack_octets(rng.randint(1, 6) for _ in range(n)),
    }


def trajectory(group: int, sample: int, step: int, with_stats: bool) -> dict:
    item = ingest.trajectory(group, sample, step)
    rng = random.Random(step * 1000 + group * 10 + sample)
    for turn in item["turns"]:
        if turn["role"] == "assistant":
            turn["token_ids"] = [rng.randrange(49152) for _ in range(TOKENS)]
            turn["loss_mask"] = [1] * TOKENS
            if with_stats:
                turn["token_stats"] = _stats(rng, TOKENS, item["advantage"])
    return item


def body(seq: int, step: int, with_stats: bool) -> bytes:
    items = [trajectory(g, s, step, with_stats) for g in range(GROUPS) for s in range(SAMPLES)]
    return json.dumps(
        {"events": [{"seq": seq, "type": "trajectories", "step": step, "items": items}]},
        separators=(",", ":"),
    ).encode()


MODEL_TOKENS_PER_TRAJECTORY = 2 * TOKENS


class Feed:
    """One run per poster and setting; prepared bodies (the client's JSON work is not timed)."""

    def __init__(self, port: int, runs: list[tuple[int, str]], with_stats: bool):
        self.port, self.with_stats = port, with_stats
        self.state = [[run_id, token, 1, 0] for run_id, token in runs]

    def posters(self, count: int) -> list[ingest.Poster]:
        posters = []
        for state in self.state:
            bodies = []
            for _ in range(count):
                bodies.append(body(state[2], state[3], self.with_stats))
                state[2] += 1
                state[3] += 1
            posters.append(
                ingest.Poster(
                    self.port,
                    f"/api/runs/{state[0]}/events",
                    ingest._headers(state[1]),
                    bodies,
                    GROUPS * SAMPLES,
                )
            )
        return posters


def stored_bytes(run_ids: list[int]) -> tuple[int, int]:
    """(bytes of the turns' token_stats, bytes of their token_ids + loss_mask) as Postgres stores them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(SUM(pg_column_size(u.token_stats)), 0),"
            " COALESCE(SUM(pg_column_size(u.token_ids) + pg_column_size(u.loss_mask)), 0)"
            " FROM rollouts_turn u JOIN rollouts_trajectory t ON t.id = u.trajectory_id WHERE t.run_id = ANY(%s)",
            [run_ids],
        )
        stats, tokens = cursor.fetchone()
    return int(stats), int(tokens)


def main() -> None:
    _postgres.ensure_database(os.environ["DATABASE_URL"])
    off_runs, on_runs, run_ids = ingest.setup_ours()
    port = ingest.free_port()
    off_bytes, on_bytes = len(body(1, 0, False)), len(body(1, 0, True))
    tokens_per_body = GROUPS * SAMPLES * MODEL_TOKENS_PER_TRAJECTORY
    print(
        f"token-stats bench: daphne on Postgres, {ingest.CLIENTS} posters, {ingest.SECONDS:g} s per phase, "
        f"{ingest.ROUNDS} rounds; {GROUPS * SAMPLES} trajectories of 2 × {TOKENS} model tokens per request",
        flush=True,
    )
    proc = ingest.start_ours(port)
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    try:
        ingest.settle([proc])
        feeds = {False: Feed(port, off_runs, False), True: Feed(port, on_runs, True)}
        for feed in feeds.values():  # warm-up, not counted
            posters = feed.posters(ingest.WARMUP_REQUESTS)
            threads = [
                threading.Thread(target=p.run, args=(time.perf_counter() + 60, False)) for p in posters
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        last: dict[bool, float | None] = {False: None, True: None}
        for round_number in range(1, ingest.ROUNDS + 1):
            for with_stats in (False, True):
                posters = feeds[with_stats].posters(
                    ingest.estimate_requests(last[with_stats], GROUPS * SAMPLES, 40)
                )
                cpu_before = ingest.server_cpu_s(proc)
                rate, p50, done, errors = ingest.run_phase(posters)
                cpu_ms = 1000 * (ingest.server_cpu_s(proc) - cpu_before) / max(done, 1)
                rates[with_stats].append(rate)
                cpu[with_stats].append(cpu_ms)
                last[with_stats] = rate
                print(
                    f"  round {round_number}: token stats {'on ' if with_stats else 'off'} {rate:8,.0f} trajectories/s "
                    f"({rate * MODEL_TOKENS_PER_TRAJECTORY:10,.0f} model tokens/s)  p50 {p50:6.1f} ms  {done} requests, "
                    f"{errors} errors, server CPU {cpu_ms:6.1f} ms/request (load average {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
        on_ids = [run_id for run_id, _ in on_runs]
        stats_stored, tokens_stored = stored_bytes(on_ids)
        from webapp.rollouts.models import Turn

        model_turns = Turn.objects.filter(trajectory__run_id__in=on_ids, token_stats__isnull=False).count()
    finally:
        ingest.stop(proc)
        ingest.remove_ours(run_ids)
    off_rate, on_rate = statistics.median(rates[False]), statistics.median(rates[True])
    off_cpu, on_cpu = statistics.median(cpu[False]), statistics.median(cpu[True])
    stored_tokens = model_turns * TOKENS
    print()
    print(
        f"RESULT wire: {(on_bytes - off_bytes) / tokens_per_body:.1f} bytes/token for token stats (request "
        f"{off_bytes / 1e6:.2f} MB → {on_bytes / 1e6:.2f} MB, ×{on_bytes / off_bytes:.2f}); stored in Postgres: "
        f"{stats_stored / max(stored_tokens, 1):.1f} bytes/token (token ids + mask: "
        f"{tokens_stored / max(stored_tokens, 1):.1f}); ingest {off_rate:,.0f} → {on_rate:,.0f} trajectories/s "
        f"with token stats on ({on_rate / off_rate:.2f}×; {on_rate * MODEL_TOKENS_PER_TRAJECTORY:,.0f} model "
        f"tokens/s); server CPU {off_cpu:.1f} → {on_cpu:.1f} ms per request of {GROUPS * SAMPLES} trajectories "
        f"(×{on_cpu / off_cpu:.2f}) [medians of {ingest.ROUNDS} rounds, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}]"
    )


if __name__ == "__main__":
    main()
