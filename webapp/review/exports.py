"""Preference dataset exports, written from a frozen PreferenceSnapshot (so a download is reproducible).

- DPO JSONL (`dpo`): TRL's conversational preference format, one JSON object a line,
  `{prompt, chosen, rejected, chosen_reward, rejected_reward, provenance}` where `prompt` is the chat
  messages before the first assistant turn (system, user) and `chosen` / `rejected` are the messages
  from it on — assistant turns (tool calls as the model wrote them), tool results (role "tool", with
  the tool's `name`) and the final answer, built by the same rule on both sides. TRL's DPOTrainer
  applies the model's chat template to them; `provenance` says where the row came from (queue, snapshot
  version, pair, trajectories, runs, steps, votes, annotators).
- DPO text JSONL (`dpo-text`): the same rows with `prompt`, `chosen` and `rejected` as plain strings,
  both responses rendered by one rule (`trainers.texts.flat_response`: one "role: text" block per
  message), so the two sides never differ in shape — a bare answer against a transcript would be a cue
  a DPO model learns instead of the preference.
- Parquet for Hugging Face `datasets` (`load_dataset("parquet", data_files=...)` or
  `Dataset.from_parquet`): the same rows with the provenance flattened into plain columns, and the
  snapshot's provenance as JSON in the file's schema metadata under `rollout_studio`.

Ties and "both bad" are not in either file: a DPO row needs a chosen and a rejected response, so a pair
enters only when a majority of its judgements picked a side (see services.MAJORITY_RULE); the
snapshot's provenance counts what was left out and why.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from django.http import HttpResponse

from trainers.texts import flat_response
from webapp.review.models import PreferenceSnapshot
from webapp.review.services import snapshot_pairs

PARQUET_METADATA_KEY = b"rollout_studio"

PARQUET_SCHEMA = pa.schema(
    [
        ("prompt", pa.string()),
        ("chosen", pa.string()),
        ("rejected", pa.string()),
        ("chosen_reward", pa.float64()),
        ("rejected_reward", pa.float64()),
        ("queue_id", pa.int64()),
        ("snapshot_version", pa.int64()),
        ("pair_id", pa.int64()),
        ("task_id", pa.string()),
        ("seed", pa.int64()),
        ("chosen_trajectory", pa.int64()),
        ("rejected_trajectory", pa.int64()),
        ("chosen_run", pa.int64()),
        ("rejected_run", pa.int64()),
        ("chosen_step", pa.int64()),
        ("rejected_step", pa.int64()),
        ("votes_chosen", pa.int64()),
        ("votes_rejected", pa.int64()),
        ("votes_tie", pa.int64()),
        ("votes_both_bad", pa.int64()),
        ("annotators", pa.list_(pa.string())),
    ]
)


def export_basename(snapshot: PreferenceSnapshot) -> str:
    queue = snapshot.provenance.get("queue", {})
    name = (
        "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in queue.get("name", "queue")).strip("-")
        or "queue"
    )
    return f"{name}-v{snapshot.version}"


def conversational_record(row: dict[str, Any]) -> dict[str, Any]:
    """One snapshot row (see services.snapshot_pairs) in TRL's conversational preference format."""
    return {
        "prompt": row["prompt_messages"] or [{"role": "user", "content": row["prompt"]}],
        "chosen": row["chosen_messages"],
        "rejected": row["rejected_messages"],
        "chosen_reward": row["chosen_reward"],
        "rejected_reward": row["rejected_reward"],
        "provenance": row["provenance"],
    }


def text_record(row: dict[str, Any]) -> dict[str, Any]:
    """One snapshot row with prompt and responses as flat strings, both sides rendered alike."""
    return {
        "prompt": row["prompt"],
        "chosen": flat_response(row["chosen_messages"]),
        "rejected": flat_response(row["rejected_messages"]),
        "chosen_reward": row["chosen_reward"],
        "rejected_reward": row["rejected_reward"],
        "provenance": row["provenance"],
    }


def dpo_records(snapshot: PreferenceSnapshot) -> list[dict[str, Any]]:
    """The snapshot in TRL's conversational format (what `dpo` exports and DPO runs train on)."""
    return [conversational_record(row) for row in snapshot_pairs(snapshot)]


def dpo_text_records(snapshot: PreferenceSnapshot) -> list[dict[str, Any]]:
    return [text_record(row) for row in snapshot_pairs(snapshot)]


def _jsonl(records: list[dict[str, Any]]) -> bytes:
    lines = (json.dumps(record, ensure_ascii=False, sort_keys=True) for record in records)
    return "".join(f"{line}\n" for line in lines).encode("utf-8")


def dpo_jsonl(snapshot: PreferenceSnapshot) -> bytes:
    return _jsonl(dpo_records(snapshot))


def dpo_text_jsonl(snapshot: PreferenceSnapshot) -> bytes:
    return _jsonl(dpo_text_records(snapshot))


def read_dpo_jsonl(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    provenance = record["provenance"]
    votes = provenance.get("votes", {})
    return {
        "prompt": record["prompt"],
        "chosen": record["chosen"],
        "rejected": record["rejected"],
        "chosen_reward": record["chosen_reward"],
        "rejected_reward": record["rejected_reward"],
        "queue_id": provenance.get("queue_id"),
        "snapshot_version": provenance.get("snapshot_version"),
        "pair_id": provenance.get("pair_id"),
        "task_id": provenance.get("task_id"),
        "seed": provenance.get("seed"),
        "chosen_trajectory": provenance.get("chosen_trajectory"),
        "rejected_trajectory": provenance.get("rejected_trajectory"),
        "chosen_run": provenance.get("chosen_run"),
        "rejected_run": provenance.get("rejected_run"),
        "chosen_step": provenance.get("chosen_step"),
        "rejected_step": provenance.get("rejected_step"),
        "votes_chosen": votes.get("chosen"),
        "votes_rejected": votes.get("rejected"),
        "votes_tie": votes.get("tie"),
        "votes_both_bad": votes.get("both_bad"),
        "annotators": provenance.get("annotators", []),
    }


def parquet_bytes(snapshot: PreferenceSnapshot) -> bytes:
    rows = [_flat(record) for record in dpo_text_records(snapshot)]
    table = pa.Table.from_pylist(rows, schema=PARQUET_SCHEMA)
    metadata = {PARQUET_METADATA_KEY: json.dumps(snapshot.provenance, sort_keys=True).encode("utf-8")}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def read_parquet(data: bytes) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows and the snapshot provenance stored in the file's metadata."""
    table = pq.read_table(io.BytesIO(data))
    provenance = json.loads((table.schema.metadata or {}).get(PARQUET_METADATA_KEY, b"{}"))
    return table.to_pylist(), provenance


# format name → (writer, content type, file suffix): the pages' downloads and the API's export share it.
EXPORT_FILES = {
    "dpo": (dpo_jsonl, "application/x-ndjson; charset=utf-8", "dpo.jsonl"),
    "dpo-text": (dpo_text_jsonl, "application/x-ndjson; charset=utf-8", "dpo-text.jsonl"),
    "parquet": (parquet_bytes, "application/vnd.apache.parquet", "parquet"),
}


def download_response(snapshot: PreferenceSnapshot, fmt: str) -> HttpResponse:
    """The snapshot as a file download in `fmt` (a key of EXPORT_FILES)."""
    write, content_type, suffix = EXPORT_FILES[fmt]
    response = HttpResponse(write(snapshot), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{export_basename(snapshot)}.{suffix}"'
    return response
