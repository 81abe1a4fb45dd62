"""Checkpoints across sessions with the real `tinker` SDK (0.38) against daphne and a real Celery worker.

Alice's colleague Bob trains a client, saves its state and goes home (the session ends). The next day a
new ServiceClient makes a training client from that state — with the optimizer (`…_with_optimizer`, the
cookbook's resume) and without — as a new run whose lineage is the checkpoint: the loss it computes is the
saved client's, and one more step from there equals the step the saved client took (only when the Adam
state came along). The RestClient lists, describes and deletes checkpoints as the SDK expects, refuses
publish and TTL saying this server does not do them, and shows Eve (no member) nothing. A session whose
run has ended answers its heartbeat 410 with why, instead of coming back to life.
"""

from __future__ import annotations

import pytest
import requests

from tests.processes import asgi_server, celery_worker
from tests.workers.test_run_lifecycle import status_of, wait_for
from tests.workers.test_tinker_sdk import sdk_env, sl_datum, tinker_service  # noqa: F401 — fixtures
from webapp.accounts.services import api_token_create
from webapp.experiments.models import Checkpoint, Run
from webapp.experiments.services import run_request_cancel
from webapp.tinker.services import sdk_key

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

ADAM = types.AdamParams(learning_rate=5e-3, grad_clip_norm=1.0)


def forward_loss(client, batch) -> float:
    return client.forward(batch, "cross_entropy").result().metrics["loss:sum"]


def train_step(client, batch) -> None:
    fb = client.forward_backward(batch, "cross_entropy")
    client.optim_step(ADAM).result()
    fb.result()


def heartbeat(url: str, key: str, session_id: str) -> requests.Response:
    return requests.post(
        f"{url}/api/v1/session_heartbeat", json={"session_id": session_id}, headers={"X-API-Key": key}
    )


def session_of(run: Run) -> str:
    return run.resolved_config["session_id"]


def ended(run: Run) -> None:
    wait_for(lambda: status_of(run) in ("SUCCEEDED", "CANCELLED"), 60, f"run #{run.pk}'s end")


def test_a_saved_state_starts_training_clients_of_later_sessions(project, users, sdk_env):  # noqa: F811
    _, raw = api_token_create(user=users["bob"], name="sdk")
    _, eve_raw = api_token_create(user=users["eve"], name="sdk")
    key = sdk_key(raw)
    with (
        asgi_server(TINKER_SESSION_TIMEOUT_S="30") as url,
        celery_worker("cpu", DASHBOARD_URL=url),
    ):
        # Day one: two steps, save_state, one more step (what the saved client would have done next).
        with tinker_service(base_url=url, api_key=key) as service:
            client = service.create_lora_training_client(base_model="smollm2-135m", rank=8, seed=0).result()
            tokenizer = client.get_tokenizer()
            batch = [
                sl_datum(tokenizer, "The capital of France is Paris."),
                sl_datum(tokenizer, "Two plus two is four."),
            ]
            for _ in range(2):
                train_step(client, batch)
            saved = client.save_state("day-one").result().path
            sampler_path = client.save_weights_for_sampler("day-one-sampler").result().path
            saved_loss = forward_loss(client, batch)
            train_step(client, batch)
            next_loss = forward_loss(client, batch)
        first = Run.objects.get(kind="tinker")
        ended(first)
        wait_for(lambda: Checkpoint.objects.filter(run=first).count() == 1, 30, "the state's checkpoint")
        state_row = Checkpoint.objects.get(run=first)
        assert state_row.path.endswith("tinker/weights/day-one")
        # A heartbeat of the finished session does not bring it back.
        gone = heartbeat(url, key, session_of(first))
        assert gone.status_code == 410 and f"Run #{first.pk} has ended (SUCCEEDED" in gone.json()["detail"]

        # Day two, the cookbook's resume: a new session, weights and Adam state from the checkpoint.
        with tinker_service(base_url=url, api_key=key) as service:
            resumed = service.create_training_client_from_state_with_optimizer(saved).result()
            assert resumed.get_info().model_data.model_name == "smollm2-135m"
            assert forward_loss(resumed, batch) == pytest.approx(saved_loss, rel=1e-5)
            train_step(resumed, batch)
            assert forward_loss(resumed, batch) == pytest.approx(next_loss, rel=1e-4)
            resumed.save_state("day-two").result()
        second = Run.objects.exclude(pk=first.pk).get(kind="tinker")
        assert (second.parent, second.parent_checkpoint, second.lineage) == (first, state_row, "resume")
        assert second.resolved_config["lora"]["rank"] == 8
        ended(second)

        # Weights only: the same loss, but a fresh Adam takes another step than the saved client's.
        with tinker_service(base_url=url, api_key=key) as service:
            fresh = service.create_training_client_from_state(saved).result()
            assert forward_loss(fresh, batch) == pytest.approx(saved_loss, rel=1e-5)
            train_step(fresh, batch)
            assert forward_loss(fresh, batch) != pytest.approx(next_loss, rel=1e-4)
            third = Run.objects.exclude(pk__in=[first.pk, second.pk]).get(kind="tinker")
            assert (third.parent_checkpoint, third.lineage) == (state_row, "init")

            # The RestClient, from Checkpoint rows.
            rest = tinker.RestClient(base_url=url, api_key=key)
            listed = rest.list_checkpoints(f"rs-run-{first.pk}").result().checkpoints
            assert [(c.checkpoint_id, c.checkpoint_type, c.tinker_path) for c in listed] == [
                ("weights/day-one", "training", saved)
            ]
            assert listed[0].size_bytes and listed[0].size_bytes > 0
            wait_for(lambda: Checkpoint.objects.filter(run=second).exists(), 30, "day two's checkpoint")
            mine = rest.list_user_checkpoints().result()
            assert [c.tinker_path for c in mine.checkpoints] == [
                f"tinker://rs-run-{second.pk}/weights/day-two",
                saved,
            ]
            assert mine.cursor.total_count == 2
            training_run = rest.get_training_run_by_tinker_path(saved).result()
            assert (training_run.base_model, training_run.lora_rank, training_run.model_owner) == (
                "smollm2-135m",
                8,
                "bob",
            )
            assert training_run.last_checkpoint.tinker_path == saved
            info = rest.get_weights_info_by_tinker_path(saved).result()
            assert (info.base_model, info.lora_rank, info.is_lora) == ("smollm2-135m", 8, True)
            runs = rest.list_training_runs().result()
            assert runs.cursor.total_count == 3
            with pytest.raises(tinker.BadRequestError, match="not supported by this server"):
                rest.publish_checkpoint_from_tinker_path(saved).result()
            with pytest.raises(tinker.BadRequestError, match="not supported by this server"):
                rest.set_checkpoint_ttl_from_tinker_path(saved, 7200).result()
            # The sampler weights saved at the state's step have no row of their own (one checkpoint a
            # step: the state's, listed above), but the path the SDK was given still answers.
            assert rest.get_weights_info_by_tinker_path(sampler_path).result().base_model == "smollm2-135m"
            with pytest.raises(tinker.NotFoundError):
                rest.get_weights_info_by_tinker_path(f"tinker://rs-run-{first.pk}/weights/never").result()

            outsider = tinker.RestClient(base_url=url, api_key=sdk_key(eve_raw))
            with pytest.raises(tinker.NotFoundError):
                outsider.list_checkpoints(f"rs-run-{first.pk}").result()
            assert outsider.list_user_checkpoints().result().checkpoints == []

            rest.delete_checkpoint_from_tinker_path(f"tinker://rs-run-{second.pk}/weights/day-two").result()
            assert rest.list_checkpoints(f"rs-run-{second.pk}").result().checkpoints == []
            assert Checkpoint.objects.get(run=second).deleted

            # A cancel in the dashboard: the session's heartbeat says so (the SDK stops beating on a 410).
            run_request_cancel(run=third, user=users["bob"])
            gone = heartbeat(url, key, session_of(third))
            assert gone.status_code == 410 and "cancelled in the dashboard" in gone.json()["detail"]
            wait_for(lambda: status_of(third) == "CANCELLED", 60, "the cancelled run")
            with pytest.raises(tinker.RequestFailedError, match="cancelled in the dashboard"):
                fresh.forward(batch, "cross_entropy").result()
