"""POST /api/projects/<slug>/external-runs/ — register a run that an external trainer trains.

Used by `trainers.sdk.Studio.start_run` (and so by the TRL callback and the importers). Authenticated
like the rest of the JSON API (a personal `rsu_…` token or a session); needs the `launch` capability
(researcher, owner). Outsiders get 404, members without the capability 403.
"""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.experiments.models import Environment, Rubric
from webapp.projects.access import access_project
from webapp.rollouts.external import MAX_ALGORITHM_CHARS, external_run_create


class ExternalRunInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    config = serializers.DictField(required=False, help_text="what the trainer ran with, as a JSON object")
    algorithm = serializers.CharField(
        max_length=MAX_ALGORITHM_CHARS, required=False, default="external",
        help_text="a label shown where dashboard runs show their preset, e.g. 'trl-grpo'",
    )
    environment = serializers.IntegerField(required=False, allow_null=True, help_text="optional: pin this environment")
    rubric = serializers.IntegerField(required=False, allow_null=True, help_text="optional: pin this rubric")
    max_steps = serializers.IntegerField(required=False, min_value=0, default=0)


class ExternalRunCreatedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    project = serializers.CharField()
    name = serializers.CharField()
    status = serializers.CharField()
    origin = serializers.CharField()
    ingest_token = serializers.CharField(help_text="the run's ingestion token; shown once, stored only as a hash")
    events_url = serializers.CharField(help_text="where to POST event batches")
    page_url = serializers.CharField(help_text="the run's dashboard page")


class ExternalRunListView(APIView):
    @extend_schema(
        request=ExternalRunInputSerializer,
        responses={201: ExternalRunCreatedSerializer},
        summary="Register an external run (TRL, verl, your script); the reply carries its ingestion token, once",
        examples=[OpenApiExample("TRL", request_only=True,
                                 value={"name": "grpo-qwen", "algorithm": "trl-grpo", "config": {"beta": 0.0}})],
    )
    def post(self, request: Request, slug: str) -> Response:
        project = access_project(request.user, slug, "launch").project
        serializer = ExternalRunInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        errors: dict[str, list[str]] = {}
        environment = rubric = None
        if data.get("environment") is not None:
            environment = Environment.objects.filter(project=project, pk=data["environment"]).first()
            if environment is None:
                errors["environment"] = ["No such environment in this project."]
        if data.get("rubric") is not None:
            rubric = Rubric.objects.filter(project=project, pk=data["rubric"]).first()
            if rubric is None:
                errors["rubric"] = ["No such rubric in this project."]
        if errors:
            raise serializers.ValidationError(errors)
        run, token = external_run_create(
            project=project, user=request.user, name=data["name"], config=data.get("config"),
            algorithm=data["algorithm"], environment=environment, rubric=rubric, max_steps=data["max_steps"],
        )
        return Response({
            "id": run.pk,
            "project": project.slug,
            "name": run.name,
            "status": run.status,
            "origin": run.origin,
            "ingest_token": token,
            "events_url": request.build_absolute_uri(reverse("run_events", args=[run.pk])),
            "page_url": request.build_absolute_uri(
                reverse("experiments:run_detail", kwargs={"slug": project.slug, "run_id": run.pk})
            ),
        }, status=201)
