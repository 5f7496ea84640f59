"""HTTP views for operating the cluster from outside: the JSON health check.

Mount them with one ``include()``::

    path("cron/", include("django_cluster_cron.urls")),   # GET /cron/health/

The health view needs no login, like any probe endpoint; what it shows is node names, the epoch
and ages in seconds. Put it behind your ingress's rules if even that is too much.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from .health import cluster_health


@never_cache
@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """The cluster's health as JSON: 200 when healthy, 503 when a check fails.

    ``?broker=0`` skips the broker connection check.
    """
    report = cluster_health(broker=request.GET.get("broker", "1") not in ("0", "false", "no"))
    return JsonResponse(report.as_dict(), status=200 if report.healthy else 503)
