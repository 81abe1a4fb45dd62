"""API serializers: output shapes, and input shapes that only coerce types (the services hold the rules)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from rest_framework import serializers

from webapp.api import fields
from webapp.api.serializers import username_field
from webapp.projects.models import INVITATION_DAYS, Invitation, Membership, Project, ProjectSecret, Role

# --- projects and members ---------------------------------------------------------------------------


class ProjectSerializer(serializers.ModelSerializer):
    created_by = username_field()
    role = serializers.CharField(
        source="my_role", read_only=True, allow_null=True, default=None, help_text="your role in this project"
    )
    run_count = serializers.IntegerField(read_only=True, default=0)
    active_run_count = serializers.IntegerField(read_only=True, default=0)
    best_reward = serializers.FloatField(read_only=True, allow_null=True, default=None)

    class Meta:
        model = Project
        fields = [
            "id",
            "name",
            "slug",
            "description",
            "created_by",
            "created_at",
            "role",
            "run_count",
            "active_run_count",
            "best_reward",
        ]


class ProjectDetailSerializer(ProjectSerializer):
    capabilities = serializers.SerializerMethodField(
        help_text="what your role allows: read, annotate, launch, manage"
    )

    class Meta(ProjectSerializer.Meta):
        fields = [*ProjectSerializer.Meta.fields, "capabilities"]

    def get_capabilities(self, project: Project) -> list[str]:
        role = getattr(project, "my_role", None)
        return sorted(Membership(role=role).capabilities()) if role else []


class ProjectInputSerializer(serializers.Serializer):
    name = fields.name(Project)
    description = fields.description()
    slug = serializers.CharField(
        allow_blank=True,
        default="",
        max_length=fields.column_length(Project, "slug"),
        help_text="slugified; derived from the name when empty; made unique with a -2, -3… suffix",
    )


class MembershipSerializer(serializers.ModelSerializer):
    user_id = serializers.IntegerField(read_only=True)
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "user_id", "username", "role", "created_at"]


class MemberInputSerializer(serializers.Serializer):
    username = fields.name(get_user_model(), "username", help_text="an existing user")
    role = serializers.ChoiceField(choices=Role.choices)


class MemberUpdateSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


# --- invitations --------------------------------------------------------------------------------------


class InvitationSerializer(serializers.ModelSerializer):
    created_by = username_field()
    used_by = username_field("used_by.username")
    state = serializers.SerializerMethodField(help_text="pending, used, revoked or expired")

    class Meta:
        model = Invitation
        fields = [
            "id",
            "role",
            "note",
            "state",
            "created_by",
            "created_at",
            "expires_at",
            "used_by",
            "used_at",
        ]

    def get_state(self, invitation: Invitation) -> str:
        return invitation.state().value


class InvitationCreatedSerializer(InvitationSerializer):
    url = serializers.SerializerMethodField(help_text="the one-time link to send; shown once")

    class Meta(InvitationSerializer.Meta):
        fields = [*InvitationSerializer.Meta.fields, "url"]

    def get_url(self, invitation: Invitation) -> str:
        return self.context["url"]


class InvitationInputSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices, default=Role.ANNOTATOR)
    note = serializers.CharField(
        allow_blank=True,
        default="",
        max_length=fields.column_length(Invitation, "note"),
        help_text="who the invitation is for",
    )
    days = serializers.IntegerField(
        default=INVITATION_DAYS, min_value=1, max_value=30, help_text="how long the link works"
    )


# --- secrets ------------------------------------------------------------------------------------------


class SecretSerializer(serializers.ModelSerializer):
    """A project secret as the API shows it: its name and dates, never its value."""

    created_by = username_field()

    class Meta:
        model = ProjectSecret
        fields = ["name", "created_by", "created_at", "updated_at"]


class SecretInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=64, help_text="letters, digits and _, e.g. JUDGE_API_KEY")
    value = serializers.CharField(
        max_length=10_000,
        write_only=True,
        trim_whitespace=False,
        help_text="stored encrypted; never returned",
    )
