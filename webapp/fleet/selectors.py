from __future__ import annotations

from datetime import timedelta

from django.db.models import QuerySet
from django.utils import timezone

from webapp.fleet.models import WorkerNode

ONLINE_WITHIN = timedelta(seconds=45)


def worker_list() -> QuerySet[WorkerNode]:
    return WorkerNode.objects.select_related("current_run", "current_run__project").order_by("-last_seen")


def is_online(node: WorkerNode) -> bool:
    return not node.stopped and timezone.now() - node.last_seen < ONLINE_WITHIN
