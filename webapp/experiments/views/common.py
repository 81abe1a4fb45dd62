"""What the experiments pages share."""

from __future__ import annotations

from django.http import HttpRequest


def posted(request: HttpRequest):
    return request.POST if request.method == "POST" else None
