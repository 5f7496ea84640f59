"""The job's audit trail in the admin: every change attributed to its operator, and the History
page that shows it (instead of Django's LogEntry messages)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from .. import audit
from ..models import JobChange
from ..redaction import redact_changes

HISTORY_LIMIT = 200


def _shown(value: Any) -> str:
    if value is None or value == "":
        return "—"
    return str(value)


class AuditedAdmin:
    """Mixin for the jobs' ModelAdmin: its pages act as the signed-in user, through "admin"."""

    admin_site: Any
    model: Any

    def audited(self, view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            with audit.acting_for(request, "admin"):
                return view(request, *args, **kwargs)

        return wrapped

    def changeform_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        with audit.acting_for(request, "admin"):
            return super().changeform_view(request, *args, **kwargs)  # type: ignore[misc]

    def changelist_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        with audit.acting_for(request, "admin"):  # the list's bulk actions
            return super().changelist_view(request, *args, **kwargs)  # type: ignore[misc]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        note = (form.cleaned_data.get("change_note") or "").strip()
        with audit.acting(note=note or None):
            super().save_model(request, obj, form, change)  # type: ignore[misc]

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: Any = None
    ) -> HttpResponse:
        job = self.get_object(request, object_id)  # type: ignore[attr-defined]
        if job is None:
            raise Http404
        if not self.has_view_or_change_permission(request, job):  # type: ignore[attr-defined]
            raise PermissionDenied
        entries = list(JobChange.objects.filter(job=job)[: HISTORY_LIMIT + 1])
        for entry in entries:
            entry.rows = [
                (field, _shown(change[0]), _shown(change[1]))
                if isinstance(change, list) and len(change) == 2
                else (field, "—", _shown(change))
                for field, change in sorted(redact_changes(entry.changes).items())
            ]
        return TemplateResponse(
            request,
            "admin/django_cluster_cron/jobdefinition/history.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "original": job,
                "title": f"History of {job}",
                "entries": entries[:HISTORY_LIMIT],
                "truncated": len(entries) > HISTORY_LIMIT,
                **(extra_context or {}),
            },
        )
