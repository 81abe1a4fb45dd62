from django.urls import path

from webapp.rewards import views

app_name = "rewards"
urlpatterns = [
    path("reward-models/", views.reward_model_list, name="reward_model_list"),
    path("reward-models/new/", views.reward_model_create, name="reward_model_create"),
    path("reward-models/<int:reward_model_id>/", views.reward_model_detail, name="reward_model_detail"),
    path(
        "reward-models/<int:reward_model_id>/status/", views.reward_model_status, name="reward_model_status"
    ),
    path(
        "reward-models/<int:reward_model_id>/register/",
        views.reward_model_register,
        name="reward_model_register",
    ),
    path(
        "reward-models/<int:reward_model_id>/retrain/",
        views.reward_model_retrain,
        name="reward_model_retrain",
    ),
    path(
        "reward-models/<int:reward_model_id>/cancel/",
        views.reward_model_cancel,
        name="reward_model_cancel",
    ),
    path("lineage/", views.lineage_index, name="lineage_index"),
    path("lineage/reward-models/<int:reward_model_id>/", views.lineage_detail, name="lineage_detail"),
    path("lineage/dpo-runs/<int:run_id>/", views.dpo_lineage, name="dpo_lineage"),
]
