"""API serializers: output shapes, and input shapes that state the limits the services enforce."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from rest_framework import serializers

from webapp.accounts.models import ApiToken
from webapp.api import fields

# --- tokens ------------------------------------------------------------------------------------------


class ApiTokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "revoked_at"]


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.SerializerMethodField(help_text="use as `Authorization: Bearer <token>`; shown once")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]

    def get_token(self, token: ApiToken) -> str:
        return self.context["raw_token"]


class ApiTokenInputSerializer(serializers.Serializer):
    name = fields.name(ApiToken, help_text="what the token is for, e.g. 'laptop script'")


class TokenSignInInputSerializer(ApiTokenInputSerializer):
    username = fields.name(get_user_model(), "username")
    password = serializers.CharField(max_length=4096, trim_whitespace=False, style={"input_type": "password"})
