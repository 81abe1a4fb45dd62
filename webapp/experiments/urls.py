from django.urls import path

from webapp.experiments import views, views_judge_check, views_preview

app_name = "experiments"
urlpatterns = [
    path("environments/", views.environment_list, name="environment_list"),
    path("environments/new/", views.environment_create, name="environment_create"),
    path("environments/config-fields/", views.environment_config_fields, name="environment_config_fields"),
    path("environments/preview/", views.environment_preview, name="environment_preview"),
    path("environments/<int:environment_id>/", views.environment_detail, name="environment_detail"),
    path("environments/<int:environment_id>/edit/", views.environment_edit, name="environment_edit"),
    path("rubrics/", views.rubric_list, name="rubric_list"),
    path("rubrics/new/", views.rubric_create, name="rubric_create"),
    path("rubrics/criterion-params/", views.criterion_params, name="criterion_params"),
    path("rubrics/preview/", views.rubric_preview, name="rubric_preview"),
    path(
        "rubrics/preview/trajectories/",
        views_preview.rubric_preview_trajectories,
        name="rubric_preview_trajectories",
    ),
    path("rubrics/<int:rubric_id>/", views.rubric_detail, name="rubric_detail"),
    path("rubrics/<int:rubric_id>/edit/", views.rubric_edit, name="rubric_edit"),
    path(
        "rubrics/<int:rubric_id>/judge-check/",
        views_judge_check.rubric_judge_check,
        name="rubric_judge_check",
    ),
    path(
        "rubrics/<int:rubric_id>/judge-check/setting/",
        views_judge_check.project_untrusted_judge,
        name="project_untrusted_judge",
    ),
    path("runs/", views.run_list, name="run_list"),
    path("runs/new/", views.run_create, name="run_create"),
    path("runs/recommended-knobs/", views.run_recommended_knobs, name="run_recommended_knobs"),
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<int:run_id>/notes/", views.run_notes, name="run_notes"),
    path("runs/<int:run_id>/resume/", views.run_resume, name="run_resume"),
    path("runs/<int:run_id>/fork/", views.run_fork, name="run_fork"),
]
