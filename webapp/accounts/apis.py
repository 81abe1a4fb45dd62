"""The JSON API of accounts: thin views that resolve objects through `webapp.projects.access`, write
through the services, read through the selectors and shape output with the serializers (docs/api.md)."""

from __future__ import annotations

from django.contrib.auth import authenticate
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, generics, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts import serializers as s
from webapp.accounts import services as account_services
from webapp.accounts import throttle
from webapp.accounts.models import ApiToken
from webapp.api import serializers as api_serializers
from webapp.api.base import NOT_FOUND, VALIDATION_ERROR, parse, secret_response
from webapp.projects.access import NotFound

# --- tokens -------------------------------------------------------------------------------------------


class TokenListView(generics.ListAPIView):
    serializer_class = s.ApiTokenSerializer

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user).order_by("-created_at", "-id")

    @extend_schema(
        request=s.ApiTokenInputSerializer,
        responses={201: s.ApiTokenCreatedSerializer, 400: VALIDATION_ERROR},
        summary="Create a personal API token; the reply carries it, once",
    )
    def post(self, request: Request) -> Response:
        data = parse(s.ApiTokenInputSerializer, request.data)
        token, raw = account_services.api_token_create(user=request.user, name=data["name"])
        return secret_response(s.ApiTokenCreatedSerializer(token, context={"raw_token": raw}).data)


class TokenDetailView(APIView):
    @extend_schema(responses={204: None, 404: NOT_FOUND}, summary="Revoke one of your tokens")
    def delete(self, request: Request, pk: int) -> Response:
        if not ApiToken.objects.filter(pk=pk, user=request.user, revoked_at=None).exists():
            raise NotFound("No such active token.")
        account_services.api_token_revoke(user=request.user, token_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TokenSignInView(APIView):
    """A script's first token, without a browser: sign in with a username and password, get a token.
    Wrong passwords count towards the sign-in throttle, as on the sign-in page."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        request=s.TokenSignInInputSerializer,
        responses={
            201: s.ApiTokenCreatedSerializer,
            400: VALIDATION_ERROR,
            429: OpenApiResponse(
                api_serializers.ErrorSerializer,
                description="too many wrong passwords for this username (`throttled`); header "
                "`Retry-After` says how many seconds to wait",
            ),
        },
        summary="Sign in with a password and create a personal API token; the reply carries it, once",
    )
    def post(self, request: Request) -> Response:
        data = parse(s.TokenSignInInputSerializer, request.data)
        refusal = throttle.throttled(request._request, data["username"])
        if refusal is not None:
            raise exceptions.Throttled(wait=refusal.retry_after_s, detail=refusal.message)
        user = authenticate(request._request, username=data["username"], password=data["password"])
        if user is None:
            raise exceptions.ValidationError({"non_field_errors": ["Wrong username or password."]})
        throttle.clear_failures(request._request, data["username"])  # as a sign-in on the page does
        token, raw = account_services.api_token_create(user=user, name=data["name"])
        return secret_response(s.ApiTokenCreatedSerializer(token, context={"raw_token": raw}).data)
