"""The Content-Security-Policy every answer carries: scripts only from our own origin (no inline script,
no eval), so a name, a model's output or a metric key that slipped through as markup still cannot run
code. The pages load their JavaScript from static/js/ (one file per page), htmx and plotly.js from our
own static files; the websocket is same-origin.

Styles allow 'unsafe-inline': templates set widths of progress bars and plotly.js positions its charts
with style attributes. A style cannot run script; the script policy is what stops XSS.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

DEFAULT_POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self' 'unsafe-inline'",
    "img-src": "'self' data: blob:",
    "font-src": "'self' data:",
    "connect-src": "'self'",  # includes ws(s):// to the same host
    "worker-src": "'self' blob:",  # Redoc's search worker
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def policy_header(policy: dict[str, str]) -> str:
    return "; ".join(f"{directive} {sources}" for directive, sources in policy.items())


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response
        self.header = policy_header(getattr(settings, "CONTENT_SECURITY_POLICY", DEFAULT_POLICY))

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", self.header)
        return response
