from django.urls import path

from webapp.experiments.views import definitions, judge_check, preview, runs

app_name = "experiments"
urlpatterns = [
    path("environments/", definitions.environment_list, name="environment_list"),
    path("environments/new/", definitions.environment_create, name="environment_create"),
    path(
        "environments/config-fields/", definitions.environment_config_fields, name="environment_config_fields"
    ),
    path("environments/preview/", definitions.environment_preview, name="environment_preview"),
    path("environments/<int:environment_id>/", definitions.environment_detail, name="environment_detail"),
    path("environments/<int:environment_id>/edit/", definitions.environment_edit, name="environment_edit"),
    path("rubrics/", definitions.rubric_list, name="rubric_list"),
    path("rubrics/new/", definitions.rubric_create, name="rubric_create"),
    path("rubrics/criterion-params/", definitions.criterion_params, name="criterion_params"),
    path("rubrics/preview/", definitions.rubric_preview, name="rubric_preview"),
    path(
        "rubrics/preview/trajectories/",
        preview.rubric_preview_trajectories,
        name="rubric_preview_trajectories",
    ),
    path("rubrics/<int:rubric_id>/", definitions.rubric_detail, name="rubric_detail"),
    path("rubrics/<int:rubric_id>/edit/", definitions.rubric_edit, name="rubric_edit"),
    path("rubrics/<int:rubric_id>/judge-check/", judge_check.rubric_judge_check, name="rubric_judge_check"),
    path(
        "rubrics/<int:rubric_id>/judge-check/setting/",
        judge_check.project_untrusted_judge,
        name="project_untrusted_judge",
    ),
    path("runs/", runs.run_list, name="run_list"),
    path("runs/new/", runs.run_create, name="run_create"),
    path("runs/recommended-knobs/", runs.run_recommended_knobs, name="run_recommended_knobs"),
    path("runs/<int:run_id>/", runs.run_detail, name="run_detail"),
    path("runs/<int:run_id>/cancel/", runs.run_cancel, name="run_cancel"),
    path("runs/<int:run_id>/delete/", runs.run_delete, name="run_delete"),
    path("runs/<int:run_id>/notes/", runs.run_notes, name="run_notes"),
    path("runs/<int:run_id>/resume/", runs.run_resume, name="run_resume"),
    path("runs/<int:run_id>/fork/", runs.run_fork, name="run_fork"),
]
