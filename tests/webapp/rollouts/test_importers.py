"""Importing TRL and verl output folders into the real dashboard (live_server), through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainers.importers.cli import main as import_main
from trainers.importers.trl import map_trl_metric_name
from webapp.experiments.models import Checkpoint, Run, RunStatus
from webapp.rollouts.models import MetricPoint, Trajectory

NAN = float("nan")


@pytest.fixture
def token(live_server, transactional_db, project, users):
    from webapp.accounts.services import api_token_create

    return api_token_create(user=users["bob"], name="importer")[1]


def write_trl_completions(directory: Path, step: int, rows: list[dict]) -> None:
    """What GRPOTrainer.log writes with log_completions=True (a pandas DataFrame saved as parquet)."""
    (directory / "completions").mkdir(parents=True, exist_ok=True)
    columns = {key: [row[key] for row in rows] for key in rows[0]}
    pq.write_table(
        pa.Table.from_pydict(columns), directory / "completions" / f"completions_{step:05d}.parquet"
    )


def chat(question: str) -> list[dict]:
    return [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": question}]


def trl_rows(step: int, answers: dict[str, list[tuple[str, float, float]]]) -> list[dict]:
    rows = []
    for question, samples in answers.items():
        for answer, correct, fmt in samples:
            rows.append(
                {
                    "step": step,
                    "prompt": chat(question),
                    "completion": [{"role": "assistant", "content": answer}],
                    "correctness": correct,
                    "format_reward": fmt,
                    "advantage": correct - 0.5,
                }
            )
    return rows


def test_it_imports_a_trl_output_folder(live_server, token, tmp_path, capsys):
    out = tmp_path / "grpo-smollm"
    write_trl_completions(
        out,
        1,
        trl_rows(1, {"2+2?": [("4", 1.0, 1.0), ("5", 0.0, 1.0)], "3+3?": [("6", 1.0, 0.0), ("?", NAN, NAN)]}),
    )
    write_trl_completions(
        out,
        2,
        trl_rows(
            2, {"2+2?": [("4", 1.0, 1.0), ("4", 1.0, 1.0)], "5+5?": [("10", 1.0, 1.0), ("11", 0.0, 0.0)]}
        ),
    )
    # num_iterations=2: TRL writes the same generation batch again under the next step.
    write_trl_completions(
        out,
        3,
        trl_rows(
            3, {"2+2?": [("4", 1.0, 1.0), ("4", 1.0, 1.0)], "5+5?": [("10", 1.0, 1.0), ("11", 0.0, 0.0)]}
        ),
    )
    checkpoint = out / "checkpoint-2"
    checkpoint.mkdir()
    (checkpoint / "adapter_config.json").write_text("{}")
    history = [
        {
            "step": 1,
            "epoch": 0.5,
            "loss": 0.01,
            "reward": 0.875,
            "reward_std": 0.5,
            "rewards/correctness/mean": 0.66,
            "rewards/format_reward/mean": 0.66,
            "kl": 0.0,
            "entropy": 1.2,
            "clip_ratio/region_mean": 0.0,
            "completions/mean_length": 3.0,
            "num_tokens": 120.0,
            "learning_rate": 1e-6,
        },
        {
            "step": 2,
            "epoch": 1.0,
            "loss": 0.02,
            "reward": 1.5,
            "reward_std": 0.4,
            "rewards/correctness/mean": 0.75,
            "kl": 0.001,
            "num_tokens": 240.0,
        },
        {"step": 2, "train_runtime": 12.5, "train_loss": 0.015},
    ]
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": history}))

    code = import_main(
        [
            "trl",
            str(out),
            "--url",
            live_server.url,
            "--token",
            token,
            "--project",
            "agents",
            "--reward-weights",
            "format_reward=0.5",
            "--timeout",
            "60",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    run = Run.objects.get()
    assert "8 trajectories" in printed and f"run {run.pk}" in printed
    assert run.name == "grpo-smollm" and run.is_external and run.preset == "trl-grpo"
    assert run.status == RunStatus.SUCCEEDED and run.current_step == 2

    # Metrics come from trainer_state.json, renamed to ours.
    def metric(key, step):
        return MetricPoint.objects.get(run=run, key=key, step=step)

    assert metric("reward/mean", 1).value == 0.875 and metric("reward/std", 2).value == 0.4
    assert metric("criterion/correctness", 2).value == 0.75 and metric("clip_fraction", 1).value == 0.0
    assert metric("response_length", 1).value == 3.0 and metric("kl", 2).value == 0.001
    assert metric("reward/mean", 1).tokens == 120 and metric("train_runtime", 2).value == 12.5

    # Trajectories: grouped by prompt within a step, weighted components, the repeated file skipped.
    assert sorted(set(Trajectory.objects.filter(run=run).values_list("step", flat=True))) == [1, 2]
    step1 = {
        (t.group_index, t.sample_index): t
        for t in Trajectory.objects.filter(run=run, step=1).prefetch_related("turns")
    }
    assert sorted(step1) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    first = step1[(0, 0)]
    assert first.prompt == "2+2?" and first.reward == 1.5 and first.advantage == 0.5
    assert [(c["name"], c["raw"], c["weight"], c["weighted"]) for c in first.components] == [
        ("correctness", 1.0, 1.0, 1.0),
        ("format_reward", 1.0, 0.5, 0.5),
    ]
    assert [(t.role, t.text) for t in first.turns.all()] == [
        ("system", "Answer briefly."),
        ("user", "2+2?"),
        ("assistant", "4"),
    ]
    assert step1[(1, 1)].status == "error" and step1[(1, 1)].reward == 0.0  # every reward function gave None
    assert (
        step1[(0, 0)].task_id
        == Trajectory.objects.get(run=run, step=2, group_index=0, sample_index=0).task_id
    )

    saved = Checkpoint.objects.get(run=run)
    assert saved.step == 2 and saved.kind == "adapter" and saved.path == str(checkpoint.resolve())
    assert saved.metrics["reward/mean"] == 1.5


def test_without_a_metric_history_the_curves_come_from_the_rollouts(live_server, token, tmp_path, capsys):
    file = tmp_path / "completions_00004.parquet"
    pq.write_table(
        pa.Table.from_pydict(
            {
                "step": ["4", "4"],
                "prompt": ["Say hi", "Say hi"],
                "completion": ["hi", "hello"],
                "reward_len": [1.0, 0.0],
            }
        ),
        file,
    )  # older TRL: step as text, plain-text prompts, no advantage
    assert (
        import_main(
            [
                "trl",
                str(file),
                "--url",
                live_server.url,
                "--token",
                token,
                "--project",
                "agents",
                "--name",
                "one file",
            ]
        )
        == 0
    )
    run = Run.objects.get(name="one file")
    assert MetricPoint.objects.get(run=run, key="reward/mean", step=4).value == 0.5
    assert MetricPoint.objects.get(run=run, key="criterion/reward_len", step=4).value == 0.5
    assert MetricPoint.objects.get(run=run, key="zero_variance_fraction", step=4).value == 0.0
    assert list(
        Trajectory.objects.filter(run=run).values_list("group_index", "sample_index", "advantage")
    ) == [(0, 0, None), (0, 1, None)]


def write_verl_dump(
    directory: Path, step: int, rows: list[tuple[str, str, float, int]], torn: bool = False
) -> None:
    """What RayPPOTrainer._dump_generations writes: <step>.jsonl, one rollout per line."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "input": prompt,
                "output": output,
                "gts": "4",
                "score": score,
                "step": step,
                "acc": acc,
                "pred": output[-1:],
            }
        )
        for prompt, output, score, acc in rows
    ]
    text = "\n".join(lines) + "\n" + ('{"input": "torn' if torn else "")
    (directory / f"{step}.jsonl").write_text(text)


def test_it_imports_a_verl_rollout_dump_through_the_trainers_command(live_server, token, tmp_path):
    rollouts, validation = tmp_path / "rollouts", tmp_path / "validation"
    prompt_a = "system\nYou are a helpful assistant.\nuser\nWhat is 2+2?\nassistant\n"
    prompt_b = "system\nYou are a helpful assistant.\nuser\nWhat is 3+1?\nassistant\n"
    write_verl_dump(
        rollouts,
        1,
        [
            (prompt_a, "It is 4", 1.0, 1),
            (prompt_a, "It is 5", 0.0, 0),
            (prompt_b, "4", 1.0, 1),
            (prompt_b, "3", 0.0, 0),
        ],
    )
    write_verl_dump(rollouts, 2, [(prompt_a, "4", 1.0, 1), (prompt_a, "4", 1.0, 1)], torn=True)
    write_verl_dump(validation, 2, [(prompt_b, "4", 1.0, 1)])

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers",
            "import",
            "verl",
            str(rollouts),
            "--eval",
            str(validation),
            "--project",
            "agents",
            "--name",
            "verl gsm8k",
        ],
        env={
            "ROLLOUT_STUDIO_URL": live_server.url,
            "ROLLOUT_STUDIO_API_TOKEN": token,
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert result.returncode == 0, result.stderr + result.stdout
    run = Run.objects.get(name="verl gsm8k")
    assert run.status == RunStatus.SUCCEEDED and run.preset == "verl"
    train = Trajectory.objects.filter(run=run, split="train")
    assert train.count() == 6
    assert sorted(train.filter(step=1).values_list("group_index", "sample_index")) == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    one = train.get(step=1, group_index=0, sample_index=1)
    assert one.reward == 0.0 and one.env_state == {
        "ground_truth": "4",
        "reward_extra_info": {"acc": 0, "pred": "5"},
    }
    assert one.components == [
        {"name": "score", "kind": "verl_reward", "raw": 0.0, "weight": 1.0, "weighted": 0.0}
    ]
    assert Trajectory.objects.get(run=run, split="eval").prompt == prompt_b
    assert MetricPoint.objects.get(run=run, key="verl/acc", step=1).value == 0.5
    assert MetricPoint.objects.get(run=run, key="zero_variance_fraction", step=2).value == 1.0
    assert MetricPoint.objects.get(run=run, key="eval/reward/mean", step=2).value == 1.0
    assert any("skipped 1 unreadable line" in e.summary["message"] for e in run.events.filter(type="log"))


def test_import_fails_loudly_without_a_project_or_a_valid_token(live_server, token, tmp_path, capsys):
    write_verl_dump(tmp_path, 1, [("p", "o", 1.0, 1)])
    with pytest.raises(SystemExit, match="--project"):
        import_main(["verl", str(tmp_path), "--url", live_server.url, "--token", token])
    assert (
        import_main(
            ["verl", str(tmp_path), "--url", live_server.url, "--token", "rsu_nope", "--project", "agents"]
        )
        == 1
    )
    assert "refused" in capsys.readouterr().err
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("trl", "ours"),
    [
        ("reward", "reward/mean"),
        ("reward_std", "reward/std"),
        ("rewards/accuracy_reward/mean", "criterion/accuracy_reward"),
        ("rewards/accuracy_reward/std", "criterion/accuracy_reward/std"),
        ("rewards/len", "criterion/len"),
        ("kl", "kl"),
        ("entropy", "entropy"),
        ("clip_ratio", "clip_fraction"),
        ("clip_ratio/region_mean", "clip_fraction"),
        ("completions/mean_length", "response_length"),
        ("eval_reward", "eval/reward/mean"),
        ("epoch", "epoch"),
    ],
)
def test_trl_metric_names_map_to_ours(trl, ours):
    assert map_trl_metric_name(trl) == ours
