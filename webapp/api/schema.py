"""OpenAPI extensions: how drf-spectacular documents our own authentication class."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "webapp.accounts.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token (`rsu_…`, created at POST /api/tokens/): "
            "`Authorization: Bearer rsu_…`.",
        }
