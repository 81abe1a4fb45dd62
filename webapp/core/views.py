from django.db import connection
from django.http import JsonResponse


def healthz(request):
    """Liveness for load balancers and compose health checks: the database answers."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"ok": True})
