"""Limits on what people type that no column states (TextField has no length). Services check them, so
the pages and the API refuse the same; the API's serializers declare them, so the OpenAPI document does."""

# Descriptions of projects, environments and rubrics.
DESCRIPTION_MAX_CHARS = 10_000
