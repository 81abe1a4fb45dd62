from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from webapp.fleet.selectors import gpu_rows, is_online, queued_runs_by_queue, worker_list
from webapp.projects.access import access_workers
from webapp.projects.models import Membership


@login_required
def workers(request):
    """Every worker process, what it has and how busy it is. A worker's current run is named only to
    members of that run's project: the page must not leak other teams' runs. Only for the members who
    launch runs (access.may_see_workers)."""
    access_workers(request.user)
    member_of = set(Membership.objects.filter(user=request.user).values_list("project_id", flat=True))
    rows = []
    for node in worker_list():
        usage = node.usage or {}
        rows.append(
            {
                "node": node,
                "online": is_online(node),
                "run": node.current_run
                if node.current_run and node.current_run.project_id in member_of
                else None,
                "busy": node.current_run_id is not None,
                "cpu_percent": usage.get("cpu_percent"),
                "memory_used_gb": (usage.get("memory_used_mb") or 0) / 1024,
                "memory_total_gb": (usage.get("memory_total_mb") or 0) / 1024,
                "memory_percent": 100
                * (usage.get("memory_used_mb") or 0)
                / (usage.get("memory_total_mb") or 1),
                "gpus": gpu_rows(node),
            }
        )
    return render(
        request, "fleet/workers.html", {"rows": rows, "queues": queued_runs_by_queue(member_of=member_of)}
    )
