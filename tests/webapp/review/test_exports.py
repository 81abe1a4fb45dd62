"""DPO JSONL and parquet exports of a preference snapshot: round trips, provenance, what is left out."""

from __future__ import annotations

import json

import pytest

from tests.webapp.review_factories import make_group
from webapp.review import exports, services

TRICKY = '<script>alert(1)</script> "quoted" ünïcode\nnew line'


@pytest.fixture
def snapshot(project, users, run):
    make_group(run, group=0, rewards=[1.0, 0.0])
    make_group(run, group=1, rewards=[0.0, 1.0], tool=True)
    make_group(run, group=2, rewards=[0.5, 0.5], prompt=TRICKY)
    queue = services.queue_create(
        project=project,
        user=users["bob"],
        name="arith prefs",
        runs=[run],
        annotators=[users["carol"]],
        seed=5,
        distinct_rewards=False,  # group 2's equal rewards make the pair with the tricky prompt
    )
    carol = users["carol"]
    while (assignment := services.next_pair(queue=queue, annotator=carol)) is not None:
        group = assignment.pair.a.group_index
        choice = {0: "a", 1: "b", 2: "b"}[group]
        services.judgement_submit(pair=assignment.pair, annotator=carol, choice=choice)
    return services.snapshot_create(queue, users["bob"])


def test_dpo_jsonl_is_trl_conversational_and_round_trips_the_snapshot(snapshot):
    data = exports.dpo_jsonl(snapshot)
    records = exports.read_dpo_jsonl(data)
    pairs = services.snapshot_pairs(snapshot)
    assert len(records) == len(pairs) == 3
    for record, pair in zip(records, pairs, strict=True):
        assert record["prompt"] == pair["prompt_messages"]
        assert record["prompt"][0] == {"role": "system", "content": "You add numbers."}
        assert record["chosen"] == pair["chosen_messages"] and record["rejected"] == pair["rejected_messages"]
        assert record["chosen"][0]["role"] == record["rejected"][0]["role"] == "assistant"
        assert record["provenance"] == pair["provenance"]
        assert record["chosen_reward"] >= record["rejected_reward"]
    tricky = next(r for r in records if r["prompt"][-1]["content"] == TRICKY)
    assert tricky["provenance"]["votes"]["chosen"] == 1
    # one object a line, UTF-8 kept as is
    assert data.count(b"\n") == 3 and "ünïcode".encode() in data
    assert set(json.loads(data.splitlines()[0])) == {
        "prompt",
        "chosen",
        "rejected",
        "chosen_reward",
        "rejected_reward",
        "provenance",
    }


def test_tool_calls_and_results_are_on_both_sides_of_a_conversational_row(snapshot):
    tool_row = next(r for r in exports.dpo_records(snapshot) if len(r["chosen"]) > 1)
    for side in (tool_row["chosen"], tool_row["rejected"]):
        assert [m["role"] for m in side] == ["assistant", "tool", "assistant"]
        assert side[0]["content"] == '<tool>{"name": "add"}</tool>'
        assert side[1]["name"] == "add"


def test_the_text_variant_renders_both_sides_by_one_rule(project, users, run):
    # One side answered at once, the other through a tool: both are "role: text" transcripts, so the
    # shape of the text says nothing about which side was preferred.
    from tests.webapp.review_factories import make_trajectory

    make_trajectory(run, group=0, sample=0, reward=1.0, answer="2")
    make_trajectory(run, group=0, sample=1, reward=0.0, answer="3", tool=True)
    queue = services.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]]
    )
    assignment = services.next_pair(queue=queue, annotator=users["carol"])
    bare_side = "a" if len(assignment.pair.a.turns.all()) == 3 else "b"
    services.judgement_submit(pair=assignment.pair, annotator=users["carol"], choice=bare_side)
    snapshot = services.snapshot_create(queue, users["bob"])
    (record,) = exports.read_dpo_jsonl(exports.dpo_text_jsonl(snapshot))
    assert record["prompt"] == "What is 0 + 2?"
    assert record["chosen"] == "assistant: <answer>2</answer>"
    assert record["rejected"] == (
        'assistant: <tool>{"name": "add"}</tool>\ntool (add): 3\nassistant: <answer>3</answer>'
    )
    assert record["provenance"]["snapshot_version"] == 1 and record["provenance"]["annotators"] == ["carol"]


def test_parquet_round_trips_and_carries_provenance(snapshot):
    rows, provenance = exports.read_parquet(exports.parquet_bytes(snapshot))
    texts = exports.dpo_text_records(snapshot)
    pairs = services.snapshot_pairs(snapshot)
    assert [(r["prompt"], r["chosen"], r["rejected"]) for r in rows] == [
        (t["prompt"], t["chosen"], t["rejected"]) for t in texts
    ]
    assert [r["pair_id"] for r in rows] == [p["provenance"]["pair_id"] for p in pairs]
    assert rows[0]["annotators"] == ["carol"] and rows[0]["snapshot_version"] == 1
    assert provenance["queue"]["name"] == "arith prefs" and provenance["counts"]["included"] == 3
    assert provenance["annotators"] == ["carol"] and provenance["created_by"] == "bob"


def test_parquet_loads_with_hugging_face_datasets(snapshot, tmp_path):
    datasets = pytest.importorskip("datasets")
    path = tmp_path / "prefs.parquet"
    path.write_bytes(exports.parquet_bytes(snapshot))
    dataset = datasets.Dataset.from_parquet(str(path), cache_dir=str(tmp_path / "cache"))
    assert dataset.num_rows == 3
    assert {"prompt", "chosen", "rejected", "chosen_reward", "annotators"} <= set(dataset.column_names)
    assert sorted(dataset["chosen_reward"]) == sorted(
        p["chosen_reward"] for p in services.snapshot_pairs(snapshot)
    )


@pytest.mark.slow
def test_both_exports_train_a_step_of_our_dpo(snapshot, tmp_path, tiny_model_path):
    """Each download, read back as a script would, trains a DPO step (trainers.recipes.dpo, the recipe a
    snapshot's "Train the policy with DPO" runs): every row is tokenized — tool calls and results of the
    conversational one, the transcripts of the text one — and the step's loss and DPO numbers come out.
    The tiny random Llama (no download): what is proved is that DPO reads the files."""
    from trainers.recipes.dpo import train_dpo
    from trainers.sdk.events import MemorySink

    for name, data in (("dpo", exports.dpo_jsonl(snapshot)), ("dpo-text", exports.dpo_text_jsonl(snapshot))):
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(data)
        sink = MemorySink()
        result = train_dpo(
            exports.read_dpo_jsonl(path.read_bytes()),
            {"model": tiny_model_path, "max_steps": 1, "batch_size": 3, "max_length": 128, "device": "cpu"},
            out_dir=tmp_path / name,
            sink=sink,
        )
        assert result.status == "SUCCEEDED" and result.steps == 1, name
        said = " | ".join(e.get("message", "") for e in sink.of_type("phase"))
        assert "tokenizing 3 of 3 pairs" in said and "step 1 of 1: 3 of 3 pairs" in said, name
        (step,) = [e["values"] for e in sink.of_type("metrics") if e["split"] == "train"]
        assert step["loss"] > 0 and {"dpo/margin", "dpo/accuracy", "dpo/reward_chosen"} <= set(step), name
        assert [c["step"] for c in sink.of_type("checkpoint")] == [1], name


def test_ties_and_both_bad_are_left_out_of_the_exports(project, users, run):
    make_group(run, group=0, rewards=[1.0, 0.0])
    make_group(run, group=1, rewards=[1.0, 0.0])
    make_group(run, group=2, rewards=[1.0, 0.0])
    queue = services.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]]
    )
    choices = iter(["tie", "both_bad", "a"])
    while (assignment := services.next_pair(queue=queue, annotator=users["carol"])) is not None:
        services.judgement_submit(pair=assignment.pair, annotator=users["carol"], choice=next(choices))
    snapshot = services.snapshot_create(queue, users["bob"])
    assert len(exports.read_dpo_jsonl(exports.dpo_jsonl(snapshot))) == 1
    assert len(exports.read_parquet(exports.parquet_bytes(snapshot))[0]) == 1
    counts = snapshot.provenance["counts"]
    assert (counts["excluded_tie"], counts["excluded_both_bad"], counts["included"]) == (1, 1, 1)


def test_an_empty_snapshot_exports_empty_files(project, users, run):
    make_group(run)
    queue = services.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]]
    )
    snapshot = services.snapshot_create(queue, users["bob"])
    assert exports.dpo_jsonl(snapshot) == b""
    rows, provenance = exports.read_parquet(exports.parquet_bytes(snapshot))
    assert rows == [] and provenance["counts"]["included"] == 0
    assert exports.export_basename(snapshot) == "q-v1"
