"""Reading trajectories: groups, one trajectory, diffs and the entry points that pick a pair to diff."""

from django.urls import path

from webapp.rollouts import views_trajectories as views

urlpatterns = [
    path("runs/<int:run_id>/groups/", views.group_list, name="group_list"),
    path("runs/<int:run_id>/groups/<int:step>/<int:group>/", views.group_detail, name="group_detail"),
    path(
        "runs/<int:run_id>/groups/<int:step>/<int:group>/best-vs-worst/",
        views.diff_best_worst,
        name="diff_best_worst",
    ),
    path("runs/<int:run_id>/tasks/", views.task_list, name="task_list"),
    path("runs/<int:run_id>/tasks/diff/", views.diff_task_steps, name="diff_task_steps"),
    path("runs/<int:run_id>/tasks/flipped/", views.task_flips, name="task_flips"),
    path("trajectories/<int:trajectory_id>/", views.trajectory_detail, name="trajectory_detail"),
    path("trajectories/<int:trajectory_id>/turns/", views.trajectory_turns, name="trajectory_turns"),
    path("trajectories/<int:trajectory_id>/json/", views.trajectory_json, name="trajectory_json"),
    path("trajectories/<int:trajectory_id>/search/", views.trajectory_search, name="trajectory_search"),
    path("trajectories/<int:trajectory_id>/atif/", views.trajectory_atif, name="trajectory_atif"),
    path("runs/<int:run_id>/atif/", views.run_atif, name="run_atif"),
    path("diff/", views.diff, name="diff"),
    path("trajectories/compare/", views.compare_trajectories, name="compare_trajectories"),
    path("diff/runs/", views.diff_task_runs, name="diff_task_runs"),
]
