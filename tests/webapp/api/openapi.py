"""The OpenAPI document /api/schema/ serves, generated once for the tests that walk every operation (at
collection, where there is no database: the generator needs none)."""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.generators import SchemaGenerator

HTTP_METHODS = ("get", "post", "put", "patch", "delete")

DOCUMENT: dict[str, Any] = json.loads(
    json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str)
)
OPERATIONS: list[tuple[str, str]] = [
    (path, method.upper())
    for path, item in DOCUMENT["paths"].items()
    for method in item
    if method in HTTP_METHODS
]
