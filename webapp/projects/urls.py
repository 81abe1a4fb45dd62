from django.urls import path

from webapp.projects import views

app_name = "projects"
urlpatterns = [
    path("", views.project_list, name="list"),
    path("p/<slug:slug>/", views.project_home, name="home"),
    path("p/<slug:slug>/members/", views.members, name="members"),
    path("p/<slug:slug>/delete/", views.project_delete, name="delete"),
    path("p/<slug:slug>/members/<int:membership_id>/role/", views.member_role, name="member_role"),
    path("p/<slug:slug>/members/<int:membership_id>/remove/", views.member_remove, name="member_remove"),
    path("p/<slug:slug>/members/invitations/", views.invitation_create, name="invitation_create"),
    path(
        "p/<slug:slug>/members/invitations/<int:invitation_id>/revoke/",
        views.invitation_revoke,
        name="invitation_revoke",
    ),
    path("p/<slug:slug>/secrets/", views.secrets, name="secrets"),
    path("p/<slug:slug>/secrets/<str:name>/delete/", views.secret_delete, name="secret_delete"),
    path("invite/<str:token>/", views.invitation, name="invitation"),
]
