"""The Tinker SDK's routes (tinker/resources/*.py in the SDK 0.38), mounted at /api/v1/ by the root URLconf."""

from django.urls import path

from webapp.tinker import views, views_rest

app_name = "tinker"

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("client/config", views.client_config, name="client_config"),
    path("telemetry", views.telemetry, name="telemetry"),
    path("get_server_capabilities", views.server_capabilities, name="capabilities"),
    path("create_session", views.create_session, name="create_session"),
    path("session_heartbeat", views.session_heartbeat, name="session_heartbeat"),
    path("sessions/<str:session_id>/finish", views.session_finish, name="session_finish"),
    path("create_model", views.create_model, name="create_model"),
    path("get_info", views.get_info, name="get_info"),
    path("forward_backward", views.forward_backward, name="forward_backward"),
    # SDKs before the protobuf path (< 0.25, or proto_write_fwdbwd off) send forward() here, as JSON.
    path("forward", views.forward_backward, {"forward_only": True}, name="forward"),
    path("optim_step", views.optim_step, name="optim_step"),
    path("save_weights", views.save_weights, name="save_weights"),
    path("load_weights", views.load_weights, name="load_weights"),
    path("save_weights_for_sampler", views.save_weights_for_sampler, name="save_weights_for_sampler"),
    path("create_sampling_session", views.create_sampling_session, name="create_sampling_session"),
    path("asample", views.asample, name="asample"),
    path("samplers/<path:sampler_id>", views.sampler, name="sampler"),
    path("retrieve_future", views.retrieve_future, name="retrieve_future"),
    # The RestClient's routes. A checkpoint id has a slash (`weights/<name>`): the longer routes first.
    path("weights_info", views_rest.weights_info, name="weights_info"),
    path("checkpoints", views_rest.user_checkpoints, name="user_checkpoints"),
    path("training_runs", views_rest.training_runs, name="training_runs"),
    path("training_runs/<str:model_id>", views_rest.training_run, name="training_run"),
    path("training_runs/<str:model_id>/checkpoints", views_rest.run_checkpoints, name="run_checkpoints"),
    path(
        "training_runs/<str:model_id>/checkpoints/<path:checkpoint_id>/publish",
        views_rest.checkpoint_publish,
        name="checkpoint_publish",
    ),
    path(
        "training_runs/<str:model_id>/checkpoints/<path:checkpoint_id>/ttl",
        views_rest.checkpoint_ttl,
        name="checkpoint_ttl",
    ),
    path(
        "training_runs/<str:model_id>/checkpoints/<path:checkpoint_id>/external_weights_urls",
        views_rest.external_weights_urls,
        name="external_weights_urls",
    ),
    path(
        "training_runs/<str:model_id>/checkpoints/<path:checkpoint_id>",
        views_rest.checkpoint,
        name="checkpoint",
    ),
    # Any other route of the SDK (sessions, audit, billing, copy_weights, …): a JSON 404 it can show.
    path("<path:route>", views_rest.unknown_route, name="unknown"),
]
