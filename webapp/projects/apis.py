"""The JSON API of projects: thin views that resolve objects through `webapp.projects.access`, write
through the services, read through the selectors and shape output with the serializers (docs/api.md)."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.api.base import (
    DELETED,
    FORBIDDEN,
    NOT_FOUND,
    VALIDATION_ERROR,
    parse,
    project_detail,
    secret_response,
)
from webapp.experiments.services.deletion import DELETED_IN_BACKGROUND, project_delete
from webapp.projects import selectors
from webapp.projects import serializers as s
from webapp.projects import services as project_services
from webapp.projects.access import (
    Capability,
    NotFound,
    ProjectAccess,
    access_project,
)
from webapp.projects.models import Membership
from webapp.projects.selectors import membership_list

# --- projects -----------------------------------------------------------------------------------------


class ProjectListView(generics.ListAPIView):
    serializer_class = s.ProjectSerializer

    def get_queryset(self):
        return selectors.project_list_with_role(self.request.user)

    @extend_schema(
        request=s.ProjectInputSerializer,
        responses={201: s.ProjectDetailSerializer, 400: VALIDATION_ERROR},
        summary="Create a project (you become its owner)",
    )
    def post(self, request: Request) -> Response:
        data = parse(s.ProjectInputSerializer, request.data)
        project = project_services.project_create(owner=request.user, **data)
        return Response(s.ProjectDetailSerializer(project_detail(request.user, project)).data, status=201)


class ProjectDetailView(APIView):
    @extend_schema(responses={200: s.ProjectDetailSerializer, 404: NOT_FOUND})
    def get(self, request: Request, slug: str) -> Response:
        access = access_project(request.user, slug, Capability.READ)
        return Response(s.ProjectDetailSerializer(project_detail(request.user, access.project)).data)

    @extend_schema(
        request=None,
        responses=DELETED,
        summary="Delete the project and everything in it (owners; refused while a run is active)",
    )
    def delete(self, request: Request, slug: str) -> Response:
        access = access_project(request.user, slug, Capability.MANAGE)
        project_delete(project=access.project, user=request.user)
        return Response({"deleted": access.project.slug, "detail": DELETED_IN_BACKGROUND}, status=202)


# --- members ------------------------------------------------------------------------------------------


class MemberListView(generics.ListAPIView):
    serializer_class = s.MembershipSerializer

    def get_queryset(self):
        return membership_list(
            access_project(self.request.user, self.kwargs["slug"], Capability.READ).project
        )

    @extend_schema(
        request=s.MemberInputSerializer,
        responses={201: s.MembershipSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Add a member, or change the role of an existing one (owners only)",
    )
    def post(self, request: Request, slug: str) -> Response:
        access = access_project(request.user, slug, Capability.MANAGE)
        data = parse(s.MemberInputSerializer, request.data)
        membership = project_services.membership_set(project=access.project, by=request.user, **data)
        return Response(s.MembershipSerializer(membership).data, status=201)


class MemberDetailView(APIView):
    def _membership(self, request: Request, slug: str, pk: int) -> tuple[ProjectAccess, Membership]:
        access = access_project(request.user, slug, Capability.MANAGE)
        membership = membership_list(access.project).filter(pk=pk).first()
        if membership is None:
            raise NotFound("No such member.")
        return access, membership

    @extend_schema(
        request=s.MemberUpdateSerializer,
        responses={200: s.MembershipSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Change a member's role (owners only; a project keeps at least one owner)",
    )
    def patch(self, request: Request, slug: str, pk: int) -> Response:
        access, membership = self._membership(request, slug, pk)
        data = parse(s.MemberUpdateSerializer, request.data)
        updated = project_services.membership_set(
            project=access.project, username=membership.user.username, role=data["role"]
        )
        return Response(s.MembershipSerializer(updated).data)

    @extend_schema(
        responses={204: None, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Remove a member (owners only; a project keeps at least one owner)",
    )
    def delete(self, request: Request, slug: str, pk: int) -> Response:
        access, membership = self._membership(request, slug, pk)
        project_services.membership_remove(project=access.project, membership_id=membership.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- invitations --------------------------------------------------------------------------------------


class InvitationListView(generics.ListAPIView):
    serializer_class = s.InvitationSerializer

    def get_queryset(self):
        return selectors.invitation_list(
            access_project(self.request.user, self.kwargs["slug"], Capability.MANAGE).project
        )

    @extend_schema(
        request=s.InvitationInputSerializer,
        responses={201: s.InvitationCreatedSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Invite a teammate: a one-time link for a role (owners only); the reply carries it, once",
    )
    def post(self, request: Request, slug: str) -> Response:
        access = access_project(request.user, slug, Capability.MANAGE)
        data = parse(s.InvitationInputSerializer, request.data)
        invitation, raw = project_services.invitation_create(
            project=access.project, created_by=request.user, **data
        )
        url = request.build_absolute_uri(reverse("projects:invitation", args=[raw]))
        return secret_response(s.InvitationCreatedSerializer(invitation, context={"url": url}).data)


class InvitationDetailView(APIView):
    @extend_schema(
        responses={204: None, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Revoke a pending invitation (owners only): its link stops working",
    )
    def delete(self, request: Request, slug: str, pk: int) -> Response:
        access = access_project(request.user, slug, Capability.MANAGE)
        if not selectors.invitation_list(access.project).filter(pk=pk).exists():
            raise NotFound("No such invitation.")
        project_services.invitation_revoke(project=access.project, invitation_id=pk, by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- secrets ------------------------------------------------------------------------------------------


class SecretListView(generics.ListAPIView):
    serializer_class = s.SecretSerializer

    def get_queryset(self):
        return selectors.secret_list(
            access_project(self.request.user, self.kwargs["slug"], Capability.LAUNCH).project
        )

    @extend_schema(
        request=s.SecretInputSerializer,
        responses={201: s.SecretSerializer, 400: VALIDATION_ERROR, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Store or replace a project secret (researchers and owners); the value is never returned",
    )
    def post(self, request: Request, slug: str) -> Response:
        access = access_project(request.user, slug, Capability.LAUNCH)
        data = parse(s.SecretInputSerializer, request.data)
        secret = project_services.secret_set(project=access.project, user=request.user, **data)
        return Response(s.SecretSerializer(secret).data, status=201)


class SecretDetailView(APIView):
    @extend_schema(
        responses={204: None, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Delete a project secret (researchers and owners)",
    )
    def delete(self, request: Request, slug: str, name: str) -> Response:
        access = access_project(request.user, slug, Capability.LAUNCH)
        if not selectors.secret_list(access.project).filter(name=name).exists():
            raise NotFound("No such secret.")
        project_services.secret_delete(project=access.project, name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)
