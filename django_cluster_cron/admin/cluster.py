"""The cluster status page: who leads, who stands by, what ran, what is stuck, which locks."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from ..models import ClusterStatus
from ..ops.status import cluster_status, force_release_lock
from ..ops.views import DETAILS_PERMISSION
from .declared import left_out
from .display import COLOURS, badge
from .readonly import ReadOnlyAdmin


@admin.register(ClusterStatus)
class ClusterStatusAdmin(ReadOnlyAdmin):
    """Listed in the admin index as "Cluster status"; its list page is the status page, shown to
    users with the permission to view the cluster status (``view_clusterstatus``)."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The page only: the leader row itself (its owner token) is never shown.
        return obj is None and request.user.has_perm(DETAILS_PERMISSION)

    def can_force_release(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser) or request.user.has_perm(
            "django_cluster_cron.forcerelease_lock"
        )

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self._force_release(request)
        status = cluster_status()
        runs = [
            (badge(name), count, COLOURS.get(name, "#777"))
            for name, count in sorted(status.runs_last_hour.items())
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Cluster status",
            "status": status,
            "runs_last_hour": runs,
            "can_force_release": self.can_force_release(request),
            "declared_left_out": left_out(),
        }
        return TemplateResponse(request, "admin/django_cluster_cron/cluster_status.html", context)

    def _force_release(self, request: HttpRequest) -> HttpResponse:
        if not self.can_force_release(request):
            raise PermissionDenied
        name = request.POST.get("lock", "")
        if name and force_release_lock(name):
            self.message_user(request, f"Released lock {name!r}.", messages.WARNING)
        else:
            self.message_user(request, f"No lock {name!r} was held.", messages.INFO)
        return HttpResponseRedirect(reverse("admin:django_cluster_cron_clusterstatus_changelist"))
