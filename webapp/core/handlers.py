"""The ASGI handler the dashboard serves HTTP with (webapp/asgi.py).

Django's own ASGI handler runs the middleware in async mode: every middleware written for sync code
(all of Django's, WhiteNoise, ours) then hops from the event loop to the request's thread and back,
twice per middleware per request, and the view once more. This handler runs the whole chain — middleware
and view — in the request's thread in one hop, as under WSGI, and keeps the rest of Django's ASGI
handling (reading the body, request signals, streaming the answer, client disconnects). Measured with
bench/ingest.py's requests: 1.4 ms less CPU per request in daphne (docs/api.md, "After the commit").
No view of the dashboard is async; one that were would still run (Django wraps it in async_to_sync).
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase


class SyncChainASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        # thread_sensitive: the request's own thread (ASGIHandler opens one context per request), the one
        # the request_started / request_finished signals close database connections in.
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)
