"""The judge check's pages: the rubric's "Check the judge" page and the run form's gate before a launch.

The check itself is `webapp.review.judge_check.judge_check` (over trainers.rubrics.judge_check); these
views only pick the truth, call it and show the figures. The run form's gate: a rubric whose judge cannot
tell right from wrong on the chosen environment's verifier is flagged before the run is queued — refused,
or warned with a "launch anyway" box — as the project's `untrusted_judge` setting says.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from trainers.models import DEFAULT_MODEL
from webapp.experiments.models import Environment
from webapp.projects.access import access_project, access_rubric
from webapp.projects.models import Capability, UntrustedJudge
from webapp.projects.services import project_set_untrusted_judge
from webapp.projects.views import project_context
from webapp.review.judge_check import JudgeCheck, judge_check
from webapp.review.models import PreferenceQueue

ACCEPT_FIELD = "accept_untrusted_judge"


class JudgeCheckForm(forms.Form):
    truth = forms.ChoiceField(
        label="Truth",
        help_text="Whose verdicts the judge is compared with: an environment's own verifier (its held-out "
        "tasks answered right and wrong), or a preference queue's human judgements.",
    )

    def __init__(self, *args: Any, project: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        environments = [
            (f"env:{e.pk}", f"Environment · {e.name}") for e in Environment.objects.filter(project=project)
        ]
        queues = [
            (f"queue:{q.pk}", f"Preference queue · {q.name}")
            for q in PreferenceQueue.objects.filter(project=project)
        ]
        truth = self.fields["truth"]
        assert isinstance(truth, forms.ChoiceField)
        truth.choices = environments + queues


@login_required
@require_http_methods(["GET", "POST"])
def rubric_judge_check(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.READ)
    rubric = access_rubric(access, rubric_id)
    version = rubric.latest_version
    form = JudgeCheckForm(request.POST or None, project=access.project)
    checks: list[JudgeCheck] | None = None
    if request.method == "POST":
        access_project(request.user, slug, Capability.LAUNCH)  # it runs a model: a launcher's action
        if form.is_valid():
            kind, _, pk = form.cleaned_data["truth"].partition(":")
            if kind == "env":
                environment = Environment.objects.get(project=access.project, pk=pk)
                checks = judge_check(spec=version.spec, environment_version=environment.latest_version)
            else:
                queue = PreferenceQueue.objects.get(project=access.project, pk=pk)
                checks = judge_check(spec=version.spec, queue=queue)
    return render(
        request,
        "experiments/judge_check.html",
        project_context(
            access,
            rubric=rubric,
            version=version,
            form=form,
            checks=checks,
            untrusted_choices=UntrustedJudge.choices,
        ),
    )


@login_required
@require_POST
def project_untrusted_judge(request: HttpRequest, slug: str, rubric_id: int) -> HttpResponse:
    access = access_project(request.user, slug, Capability.MANAGE)
    try:
        project_set_untrusted_judge(project=access.project, value=request.POST.get("untrusted_judge", ""))
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(
            request, f"A judge that fails its check: {access.project.get_untrusted_judge_display()}."
        )
    return redirect("experiments:rubric_judge_check", slug, rubric_id)


def launch_judge_gate(request: HttpRequest, project: Any, launcher: Any) -> bool:
    """Before a launch from the run form: check the rubric's judges on the chosen environment's verifier.
    True when the launch must wait — refused (an error on the rubric field) or warned (the form shows the
    figures and a "launch anyway" box); False when it may go on."""
    data = launcher.form.cleaned_data
    rubric_version, environment_version = data["rubric"].latest_version, data["environment"].latest_version
    if rubric_version is None or environment_version is None:
        return False
    model = str(launcher.knobs.values().get("model") or DEFAULT_MODEL)
    checks = judge_check(
        spec=rubric_version.spec, environment_version=environment_version, policy_model=model
    )
    untrusted = [check for check in checks if check.untrusted]
    launcher.judge_checks = checks
    if not untrusted:
        return False
    verdicts = [
        f"Judge “{check.criterion}”: {check.agreement.verdict}" for check in untrusted if check.agreement
    ]
    if project.untrusted_judge == UntrustedJudge.REFUSE:
        launcher.form.add_error(
            "rubric", verdicts + ["This project refuses such a launch (its judge check setting)."]
        )
        return True
    if request.POST.get(ACCEPT_FIELD):
        return False
    launcher.judge_warning = untrusted
    return True
