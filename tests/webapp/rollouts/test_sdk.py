"""trainers.sdk against the real dashboard served over HTTP (pytest-django's live_server)."""

from __future__ import annotations

import pytest

from trainers.sdk.client import Studio, StudioError, attach, trajectory_item
from trainers.types import Task, Trajectory, Turn
from webapp.experiments.models import Checkpoint, Run, RunStatus
from webapp.rollouts.models import MetricPoint, RunEvent
from webapp.rollouts.models import Trajectory as StoredTrajectory

FAST = {"flush_interval_s": 0.02, "heartbeat_interval_s": 0.2}


@pytest.fixture
def studio(live_server, transactional_db, project, users):
    from webapp.accounts.services import api_token_create

    _token, raw = api_token_create(user=users["bob"], name="sdk test")
    return Studio(live_server.url, raw)


def test_a_run_round_trips_metrics_trajectories_checkpoints_and_status(studio):
    with studio.start_run(
        project="agents",
        name="my script",
        config={"lr": 1e-6, "beta": float("nan")},
        algorithm="custom-grpo",
        **FAST,
    ) as run:
        run.log("starting")
        for step in range(3):
            run.log_metrics(
                step,
                {"reward/mean": step / 2, "kl": float("nan"), "loss": 0.5 - step / 10},
                tokens=100 * step,
            )
        # Two prompts, three samples each, logged in two calls: grouped by prompt across the calls.
        run.log_trajectories(
            2,
            [
                {"prompt": "2+2?", "completion": "4", "reward": 1.0},
                {"prompt": "3+3?", "completion": "7", "reward": 0.0},
                {"prompt": "2+2?", "completion": "5", "reward": 0.0},
            ],
        )
        run.log_trajectories(
            2,
            [
                {"prompt": "2+2?", "completion": "4!", "reward": 1.0, "advantage": 0.6},
                {"prompt": "3+3?", "completion": "6", "reward": 1.0, "components": {"correct": 1.0}},
                {"prompt": "3+3?", "completion": "six", "reward": 0.5},
            ],
        )
        run.log_checkpoint(2, "/ckpt/step-2", {"reward/mean": 1.0})
    assert run.status == "SUCCEEDED" and run.stats["rejected"] == 0 and run.stats["invalid"] == 0

    stored = Run.objects.get(pk=run.id)
    assert stored.status == RunStatus.SUCCEEDED and stored.is_external and stored.preset == "custom-grpo"
    assert stored.resolved_config["lr"] == 1e-6 and stored.resolved_config["beta"] is None
    assert stored.current_step == 2 and stored.last_reward == 1.0
    assert list(
        MetricPoint.objects.filter(run=stored, key="reward/mean")
        .order_by("step")
        .values_list("value", flat=True)
    ) == [0, 0.5, 1.0]
    assert not MetricPoint.objects.filter(run=stored, key="kl").exists()
    assert MetricPoint.objects.get(run=stored, key="loss", step=2).tokens == 200
    groups = {}
    for t in StoredTrajectory.objects.filter(run=stored).prefetch_related("turns"):
        groups.setdefault(t.group_index, []).append(
            (t.sample_index, t.prompt, t.reward, [x.role for x in t.turns.all()])
        )
    assert sorted(groups) == [0, 1]
    assert sorted(s for s, *_ in groups[0]) == [0, 1, 2] and {p for _, p, *_ in groups[0]} == {"2+2?"}
    assert sorted(s for s, *_ in groups[1]) == [0, 1, 2] and {p for _, p, *_ in groups[1]} == {"3+3?"}
    assert all(roles == ["user", "assistant"] for *_, roles in groups[0] + groups[1])
    one_task = StoredTrajectory.objects.filter(run=stored, group_index=0).values_list("task_id", flat=True)
    assert len(set(one_task)) == 1 and next(iter(one_task)).startswith("prompt-")
    assert (
        StoredTrajectory.objects.get(run=stored, group_index=1, sample_index=1).components[0]["name"]
        == "correct"
    )
    assert Checkpoint.objects.get(run=stored).path == "/ckpt/step-2"
    assert RunEvent.objects.filter(run=stored, type="log").get().summary["message"] == "starting"


def test_an_exception_reports_failed_with_the_traceback(studio):
    def train(run):
        run.log_metrics(0, {"reward/mean": 0.1})
        raise ValueError("the loss went NaN")

    with pytest.raises(ValueError, match="loss went NaN"):
        with studio.start_run(project="agents", name="crashing", **FAST) as run:
            train(run)
    stored = Run.objects.get(pk=run.id)
    assert stored.status == RunStatus.FAILED
    assert stored.error_message == "ValueError: the loss went NaN"
    assert "in train" in stored.error_traceback and "Traceback" in stored.error_traceback
    assert MetricPoint.objects.filter(run=stored).count() == 1


def test_should_cancel_follows_the_dashboard_and_the_run_ends_cancelled(studio):
    from webapp.experiments.services import run_request_cancel

    with studio.start_run(project="agents", name="long", **FAST) as run:
        run.log_metrics(0, {"reward/mean": 0.0})
        assert run.flush(10) and not run.should_cancel()
        assert run_request_cancel(run=Run.objects.get(pk=run.id)) == "cancel_requested"
        for step in range(1, 500):
            run.log_metrics(step, {"reward/mean": 0.0})
            run.flush(10)
            if run.should_cancel():
                break
        assert run.should_cancel()
    assert Run.objects.get(pk=run.id).status == RunStatus.CANCELLED


def test_bad_data_is_dropped_without_losing_the_good(studio, caplog):
    run = studio.start_run(project="agents", name="sloppy", **FAST)
    run.log_metrics(0, {"x" * 101: 1.0, "ok": 1.0, "text": "high"})
    run.log_trajectories(
        0, [{"prompt": "p", "completion": "c"}, {"prompt": "p", "completion": "d", "reward": 1}]
    )
    run.log_metrics(-1, {"ok": 2.0})
    assert run.finish()
    assert run.stats["invalid"] == 4 and run.stats["rejected"] == 0
    assert list(MetricPoint.objects.filter(run_id=run.id).values_list("key", flat=True)) == ["ok"]
    assert StoredTrajectory.objects.filter(run_id=run.id).count() == 1
    assert "dropped" in caplog.text
    run.log_metrics(1, {"ok": 1.0})  # after finish: dropped, no error
    assert run.stats["invalid"] == 5


def test_attach_reports_to_a_dispatched_run_and_continues_its_sequence(
    live_server, transactional_db, project, environment, rubric, users
):
    from webapp.experiments.services import run_create

    dispatched, token = run_create(
        project=project,
        name="dispatched",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    first = attach(live_server.url, dispatched.pk, token, **FAST)
    first.log_metrics(0, {"reward/mean": 0.25})
    assert first.flush(10)
    assert Run.objects.get(pk=dispatched.pk).status == RunStatus.RUNNING
    first.sink.close()  # the process died without finishing; a restarted one attaches again

    second = Studio(live_server.url).attach(dispatched.pk, token, **FAST)
    second.log_metrics(1, {"reward/mean": 0.5})
    assert second.finish("SUCCEEDED")
    assert list(
        MetricPoint.objects.filter(run=dispatched).order_by("step").values_list("value", flat=True)
    ) == [0.25, 0.5]
    assert Run.objects.get(pk=dispatched.pk).status == RunStatus.SUCCEEDED
    assert second.stats["duplicates"] == 0


def test_start_run_says_why_it_cannot(live_server, studio):
    with pytest.raises(StudioError, match="404"):
        studio.start_run(project="no-such-project", name="x")
    with pytest.raises(StudioError, match="401|403"):
        Studio(live_server.url, "rsu_wrong").start_run(project="agents", name="x")
    with pytest.raises(StudioError, match="could not reach"):
        Studio("http://127.0.0.1:9", "rsu_x", timeout_s=2).start_run(project="agents", name="x")


def test_trajectory_item_reads_the_shapes_trainers_have():
    chat = trajectory_item(
        {
            "prompt": [
                {"role": "system", "content": "Use tools."},
                {"role": "user", "content": "Weather in Oslo?"},
            ],
            "completion": [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
                    ],
                },
                {"role": "tool", "name": "weather", "content": "-3C"},
                {"role": "assistant", "content": [{"type": "text", "text": "It is -3C."}]},
            ],
            "reward": 1,
            "group": 4,
            "sample": 2,
        }
    )
    assert [t["role"] for t in chat["turns"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert chat["turns"][2]["tool_name"] == "weather" and chat["turns"][2]["tool_args"] == {"city": "Oslo"}
    assert chat["turns"][3]["tool_result"] == "-3C" and chat["turns"][4]["text"] == "It is -3C."
    assert chat["prompt"] == "Weather in Oslo?" and (chat["group"], chat["sample"]) == (4, 2)

    ours = trajectory_item(
        Trajectory(
            task=Task(id="add-7", prompt="3+4?"),
            turns=[Turn("user", "3+4?"), Turn("assistant", "7", token_ids=[5], loss_mask=[1])],
            env_reward=1.0,
        )
    )
    assert ours["task_id"] == "add-7" and ours["reward"] == 1.0 and ours["turns"][1]["token_ids"] == [5]

    summed = trajectory_item(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "components": [
                {"name": "a", "raw": 1.0, "weight": 0.5},
                {"name": "b", "raw": float("nan"), "weight": 1},
            ],
        }
    )
    assert summed["reward"] == 0.5 and [c["name"] for c in summed["components"]] == ["a"]
    with pytest.raises(ValueError):
        trajectory_item({"prompt": "p", "completion": "c", "reward": float("inf")})


def test_model_output_with_nul_and_lone_surrogates_is_stored_not_refused(studio):
    """Postgres cannot store NUL or lone surrogates; a batch holding them must not fail on every retry."""
    with studio.start_run(project="agents", name="hostile output", **FAST) as run:
        run.log_trajectories(
            0,
            [
                {
                    "prompt": "p\x00",
                    "completion": "bad\x00byte \ud800 half",
                    "reward": 1.0,
                    "env_state": {"note\x00": "x\udfff"},
                }
            ],
        )
        run.log("tool said \x00")
    assert run.stats["rejected"] == 0 and run.stats["retries"] == 0
    stored = StoredTrajectory.objects.get(run_id=run.id)
    assert stored.prompt == "p\ufffd" and stored.env_state == {"note\ufffd": "x\ufffd"}
    assert stored.turns.get(role="assistant").text == "bad\ufffdbyte \ufffd half"


def test_nan_is_not_json(live_server, studio):
    import requests

    run = studio.start_run(project="agents", name="nan", **FAST)
    response = requests.post(
        f"{live_server.url}/api/runs/{run.id}/events",
        headers={"Authorization": f"Bearer {run.token}", "Content-Type": "application/json"},
        data='{"events": [{"seq": 1, "type": "checkpoint", "step": 1, "path": "/c", "metrics": {"loss": NaN}}]}',
    )
    assert response.status_code == 400 and response.json()["error"] == "malformed_json"
    assert "NaN is not JSON" in response.json()["detail"]
    run.finish()


def test_an_external_trainer_says_which_phase_it_is_in(studio):
    with studio.start_run(project="agents", name="phased", algorithm="custom-grpo", **FAST) as run:
        run.phase("generating", 1, total=4, message="sampling")
        run.phase("generating", 1, done=3, total=4)
        run.phase("warming up", 1)  # not a phase the dashboard knows: dropped here, not refused there
    assert run.stats["rejected"] == 0 and run.stats["invalid"] == 1
    phases = [e.summary for e in RunEvent.objects.filter(run_id=run.id, type="phase").order_by("seq")]
    assert [(p["phase"], p["step"], p["done"], p["total"]) for p in phases] == [
        ("generating", 1, 0, 4),
        ("generating", 1, 3, 4),
    ]
    assert (
        phases[0]["elapsed_s"] == 0.0 and phases[1]["elapsed_s"] >= 0.0 and phases[0]["message"] == "sampling"
    )
