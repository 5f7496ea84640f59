"""HTTP views for operating the cluster from outside: the JSON health check.

Mount them with one ``include()``::

    path("cron/", include("django_cluster_cron.urls")),   # GET /cron/health/

The health view needs no login, like any probe endpoint, and so tells an anonymous caller only
whether the cluster is healthy and each check's name and status. Reasons and values (which node
leads, epochs, lags, error text naming hosts) go to a logged-in user with the permission to view
the cluster status (``django_cluster_cron.view_clusterstatus``) or to a caller that sends the
``HEALTH_TOKEN`` setting as ``Authorization: Bearer <token>``. Each process answers from its last
report for ``HEALTH_CACHE`` seconds, and one request at a time runs the checks: a flood of probes
costs one round of queries and one broker connection per interval.
"""

from __future__ import annotations

import hmac
import threading
import time

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ..conf import app_settings
from .health import HealthReport, cluster_health

DETAILS_PERMISSION = "django_cluster_cron.view_clusterstatus"

_reports: dict[bool, tuple[float, HealthReport]] = {}
_checking = threading.Lock()


def recent_health(*, broker: bool) -> HealthReport:
    """The last report if younger than ``HEALTH_CACHE`` seconds, else a new one (one at a time:
    concurrent callers wait for it rather than each running the checks)."""
    with _checking:
        found = _reports.get(broker)
        if found is not None and time.monotonic() - found[0] < app_settings.HEALTH_CACHE:
            return found[1]
        report = cluster_health(broker=broker)
        _reports[broker] = (time.monotonic(), report)
        return report


def forget_reports() -> None:
    """Drop the cached reports (tests; a settings change)."""
    with _checking:
        _reports.clear()


def may_see_details(request: HttpRequest) -> bool:
    token = app_settings.HEALTH_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if token and scheme == "Bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.has_perm(DETAILS_PERMISSION))


@never_cache
@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """The cluster's health as JSON: 200 when healthy, 503 when a check fails.

    ``?broker=0`` skips the broker connection check.
    """
    report = recent_health(broker=request.GET.get("broker", "1") not in ("0", "false", "no"))
    body = report.as_dict(details=may_see_details(request))
    return JsonResponse(body, status=200 if report.healthy else 503)
