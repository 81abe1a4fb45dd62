from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from webapp.fleet.selectors import is_online, worker_list
from webapp.projects.models import Membership


@login_required
def workers(request):
    """Every worker process and what it has. A worker's current run is named only to members of that
    run's project: the page must not leak other teams' runs."""
    member_of = set(Membership.objects.filter(user=request.user).values_list("project_id", flat=True))
    rows = [
        {
            "node": node,
            "online": is_online(node),
            "run": node.current_run if node.current_run and node.current_run.project_id in member_of else None,
            "busy": node.current_run_id is not None,
        }
        for node in worker_list()
    ]
    return render(request, "fleet/workers.html", {"rows": rows})
