"""The command line, run as a real subprocess."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainers.cli import ProgressSink, load_config
from trainers.sdk.events import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "trainers" / "examples" / "arithmetic_grpo.yaml"


def run_cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainers", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_the_example_config_is_valid_and_overrides_apply():
    config = load_config(EXAMPLE, ["lora.enabled=true", "group_size=4"])
    assert config["environment"]["kind"] == "arithmetic_calculator"
    assert config["lora"]["enabled"] is True and config["group_size"] == 4


def test_bad_configs_and_missing_report_credentials_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"clip_low": 5, "environment": {"kind": "arithmetic_calculator"}}))
    result = run_cli("train", str(bad), "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "clip_low" in result.stderr
    result = run_cli(
        "train", str(EXAMPLE), "--out", str(tmp_path / "out"), "--report-to", "http://127.0.0.1:9"
    )
    assert result.returncode == 2 and "--token" in result.stderr


def test_progress_is_plain_lines_off_a_terminal():
    stream = io.StringIO()
    sink = ProgressSink(10, stream=stream, tty=False)
    sink.emit({"type": "metrics", "step": 3, "split": "train", "values": {"reward/mean": 0.25, "loss": -0.1}})
    sink.emit({"type": "status", "status": "SUCCEEDED", "message": "finished 10 steps"})
    assert stream.getvalue().splitlines() == [
        "step 3/10 reward=0.25 loss=-0.1",
        "SUCCEEDED: finished 10 steps",
    ]


@pytest.mark.slow
def test_train_then_eval_from_the_checkpoint(tmp_path, tiny_model_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": tiny_model_path,  # the command line's plumbing, not what a model learns
                "environment": {"kind": "arithmetic_calculator", "config": {"max_turns": 1}},
                "group_size": 2,
                "prompts_per_step": 1,
                "max_steps": 1,
                "max_new_tokens": 8,
                "max_turns": 1,
                "eval_tasks": 2,
                "checkpoint_every": 0,
                "torch_threads": 1,
            }
        )
    )
    out = tmp_path / "run"
    result = run_cli("train", str(config), "--out", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["status"] == "SUCCEEDED" and summary["step"] == 1
    assert "step 1/1" in result.stderr
    events = read_jsonl(out / "events.jsonl")
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "status" and events[-1]["status"] == "SUCCEEDED"
    checkpoint = Path(summary["checkpoint"])
    assert (checkpoint / "trainer_state.json").exists() and (checkpoint / "optimizer.pt").exists()

    result = run_cli("eval", str(config), "--checkpoint", str(checkpoint))
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stdout)
    assert "eval/reward/mean" in metrics and "eval/accuracy" in metrics


def test_dpo_and_eval_start_from_a_lora_runs_checkpoint(tmp_path, tiny_model_path):
    """The demo trains LoRA: its checkpoint is a model the `dpo` and `eval` commands start from."""
    config = tmp_path / "lora.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": tiny_model_path,
                "environment": {"kind": "arithmetic_calculator", "config": {"max_turns": 1}},
                "lora": {"enabled": True, "r": 4},
                "group_size": 2,
                "prompts_per_step": 1,
                "max_steps": 1,
                "max_new_tokens": 8,
                "max_turns": 1,
                "eval_tasks": 2,
                "checkpoint_every": 0,
                "torch_threads": 1,
            }
        )
    )
    trained = run_cli("train", str(config), "--out", str(tmp_path / "grpo"))
    assert trained.returncode == 0, trained.stderr
    checkpoint = json.loads(trained.stdout.strip().splitlines()[-1])["checkpoint"]
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"prompt": f"What is {a} + {a}?", "chosen": f"{2 * a}", "rejected": f"{a}"} for a in range(6)]
    pairs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    dpo = run_cli(
        "dpo", str(pairs), "--out", str(tmp_path / "dpo"), "--set", f"model={checkpoint}",
        "--set", "max_steps=1", "--set", "batch_size=2", "--set", "max_length=32", "--set", "device=cpu",
    )  # fmt: skip
    assert dpo.returncode == 0, dpo.stderr
    summary = json.loads(dpo.stdout.strip().splitlines()[-1])
    assert summary["status"] == "SUCCEEDED" and summary["step"] == 1
    # DPO's numbers are named as DPO's: a preference accuracy is not read as a task's accuracy
    assert re.search(r"^step 1/1 loss=\S+ dpo/margin=\S+ dpo/accuracy=\S+", dpo.stderr, re.M), dpo.stderr
    assert re.search(r"^eval @ step 1: dpo/accuracy=\S+ dpo/margin=\S+", dpo.stderr, re.M), dpo.stderr
    evaluated = run_cli("eval", str(config), "--checkpoint", checkpoint)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "eval/accuracy" in json.loads(evaluated.stdout)


def test_preview_prints_what_the_model_would_see_or_why_not(capsys):
    from trainers.cli import main

    assert main(["preview", "countdown", "--set", "num_numbers=3"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["ok"] and shown["tools"][0]["name"] == "calculator"
    assert main(["preview", "arithmetic_calculator", "--set", "min_digits=5", "--set", "max_digits=2"]) == 1
    assert "max_digits" in json.loads(capsys.readouterr().out)["errors"]


def test_a_bad_config_is_explained_in_plain_words(tmp_path):
    from trainers.cli import CliError

    path = tmp_path / "bad.yaml"
    path.write_text("learning_rate: -1\nmax_new_tokens: 0\n")
    with pytest.raises(CliError) as caught:
        load_config(path)
    assert "learning_rate: Learning rate must be more than 0 (got -1)." in str(caught.value)
    assert "max_new_tokens: Max new tokens must be 1 or more (got 0)." in str(caught.value)


def test_exponents_without_a_dot_are_numbers_in_files_and_overrides(tmp_path):
    """PyYAML alone reads `2e-5` as text (YAML 1.1), and the config check then refused the learning rate."""
    path = tmp_path / "run.yaml"
    path.write_text(EXAMPLE.read_text() + "\nlearning_rate: 2e-5\n")
    assert load_config(path)["learning_rate"] == 2e-5
    config = load_config(EXAMPLE, ["learning_rate=3E-4", "max_grad_norm=1e0", "model=1e5x"])
    assert config["learning_rate"] == 3e-4 and config["max_grad_norm"] == 1.0
    assert config["model"] == "1e5x"  # text that only looks alike stays text


@pytest.mark.slow
def test_a_reward_model_trains_from_a_jsonl_of_pairs_on_any_base(tmp_path, tiny_model_path):
    """`reward-model`: the snapshot's text pairs → a Bradley–Terry model directory the `learned_reward`
    criterion loads; `--set model=` names the frozen base (a checkpoint directory works as any local model)."""
    pairs = tmp_path / "pairs.jsonl"
    rows = [
        {"prompt": f"What is {a} + {a}?", "chosen": f"It is {2 * a}.", "rejected": "I do not know."}
        for a in range(8)
    ]
    pairs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "rm"
    trained = run_cli(
        "reward-model", str(pairs), "--out", str(out), "--set", f"model={tiny_model_path}",
        "--set", "epochs=5", "--set", "held_out_fraction=0.25",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    summary = json.loads(trained.stdout.strip().splitlines()[-1])
    assert summary["n_train"] == 6 and summary["n_eval"] == 2 and (out / "reward_model.json").exists()

    refused = run_cli("reward-model", str(pairs), "--set", "epochs=0")
    assert refused.returncode != 0 and "epochs" in refused.stderr
