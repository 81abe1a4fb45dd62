"""`{{ user|may_see_workers }}`: whether the header links the Workers page (webapp.projects.access)."""

from __future__ import annotations

from typing import Any

from django import template

from webapp.projects import access

register = template.Library()


@register.filter
def may_see_workers(user: Any) -> bool:
    return access.may_see_workers(user)
