"""Importing trajectories from the web: ATIF files (a Harbor job's trajectories, our own export) become a
finished external run. The CLI (`python -m trainers.importers atif`) does the same from a terminal."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from webapp.projects.access import Capability, access_project
from webapp.projects.views import project_context
from webapp.rollouts.external import external_run_import_atif


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files in one input (Django's documented pattern): cleans to a list."""

    def clean(self, data, initial=None):
        single = super().clean
        if isinstance(data, list | tuple):
            return [single(item, initial) for item in data]
        return [single(data, initial)] if data else []


class AtifImportForm(forms.Form):
    name = forms.CharField(max_length=120, initial="Imported ATIF trajectories")
    split = forms.ChoiceField(choices=[("train", "train"), ("eval", "eval")], initial="train")
    files = MultipleFileField(
        widget=MultipleFileInput(attrs={"accept": ".json,.jsonl,.zip", "multiple": True}),
        required=False,
        help_text="ATIF trajectories (v1.0–v1.8): .json files (one or a list), .jsonl (one per line), or a "
        ".zip of a folder of them — a zipped Harbor job brings each trial's verifier reward (result.json).",
    )


@login_required
@require_http_methods(["GET", "POST"])
def atif_import(request: HttpRequest, slug: str) -> HttpResponse:
    access = access_project(request.user, slug, Capability.LAUNCH, action="import trajectories")
    form = AtifImportForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        try:
            run, summary = external_run_import_atif(
                project=access.project,
                user=request.user,
                name=form.cleaned_data["name"],
                files=form.cleaned_data["files"],
                split=form.cleaned_data["split"],
            )
        except ValidationError as error:
            for field, field_messages in error.message_dict.items():
                form.add_error(field if field in form.fields else None, field_messages)
        else:
            note = f"Imported {summary.trajectories} trajectories over {len(summary.steps)} steps."
            if summary.without_reward:
                note += f" {summary.without_reward} carried no reward (status error)."
            if summary.skipped_files:
                note += f" {len(summary.skipped_files)} files or lines were not ATIF and were passed over."
            messages.success(request, note)
            return redirect("experiments:run_detail", access.project.slug, run.pk)
    return render(request, "rollouts/atif_import.html", project_context(access, form=form))
