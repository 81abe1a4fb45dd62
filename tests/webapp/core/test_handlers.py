"""HTTP through webapp.asgi.application, as daphne serves it: the SyncChainASGIHandler runs the middleware
and the view in the request's thread in one hop, and answers exactly as Django's own ASGI handler did."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator

from webapp.asgi import application
from webapp.rollouts.external import external_run_create
from webapp.rollouts.models import MetricPoint

pytestmark = pytest.mark.django_db(transaction=True)


def serve(method: str, path: str, body: bytes = b"", headers: tuple = ()) -> tuple[int, dict, bytes]:
    async def exchange():
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": [(b"host", b"testserver"), *headers],
            "client": ("127.0.0.1", 40000),
            "server": ("testserver", 80),
        }
        communicator = ApplicationCommunicator(application, scope)
        await communicator.send_input({"type": "http.request", "body": body})
        start = await communicator.receive_output(30)
        chunks = []
        while True:
            message = await communicator.receive_output(30)
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        return (
            start["status"],
            {k.decode().lower(): v.decode() for k, v in start["headers"]},
            b"".join(chunks),
        )

    return async_to_sync(exchange)()


def test_a_trainers_report_through_the_asgi_app_is_stored_and_answered_with_the_sites_headers(project, users):
    run, token = external_run_create(project=project, user=users["alice"], name="served")
    batch = {"events": [{"seq": 1, "type": "metrics", "step": 3, "values": {"reward/mean": 0.5, "kl": 0.1}}]}
    status, headers, body = serve(
        "POST",
        f"/api/runs/{run.pk}/events",
        json.dumps(batch).encode(),
        ((b"authorization", f"Bearer {token}".encode()), (b"content-type", b"application/json")),
    )
    assert status == 200, body
    assert json.loads(body) == {"accepted": 1, "duplicates": 0, "last_seq": 1, "control": {"cancel": False}}
    assert "script-src 'self'" in headers["content-security-policy"]  # the middleware ran
    assert MetricPoint.objects.filter(run=run).count() == 2


def test_a_page_through_the_asgi_app_sends_an_anonymous_visitor_to_sign_in():
    status, headers, _ = serve("GET", "/")
    assert status == 302 and "/accounts/login/" in headers["location"]
    assert headers["x-frame-options"] == "DENY"
