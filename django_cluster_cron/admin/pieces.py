"""A run split into pieces, on its admin page: its progress, its pieces (those that did not
succeed first), and a retry of one failed piece or of them all."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import actions
from ..actions import ActionRefused
from ..ledger.piece_runs import progress_of
from ..models import JobPiece, JobRun, PieceStatus
from ..validation import whole_number
from .display import duration_text

# Pieces shown on a run's page: every one that did not succeed comes first, up to this many.
SHOWN = 200


class RunPieces:
    """The pieces part of ``JobRunAdmin`` (a mixin of it)."""

    if TYPE_CHECKING:  # what the ModelAdmin it is mixed into gives
        admin_site: Any

        def message_user(self, *args: Any, **kwargs: Any) -> None: ...

        def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any: ...

        def get_object(self, *args: Any, **kwargs: Any) -> Any: ...

        def has_retry_permission(self, request: HttpRequest) -> bool: ...

    @admin.display(description="progress")
    def progress(self, run: JobRun) -> str:
        return progress_of(run) or "—"

    @admin.display(description="pieces")
    def pieces_table(self, run: JobRun) -> SafeString | str:
        if not run.piece_count:
            return "—"
        found = JobPiece.objects.filter(run=run)
        failing = list(found.exclude(status=PieceStatus.SUCCESS).order_by("index")[:SHOWN])
        rest = SHOWN - len(failing)
        shown = failing + list(found.filter(status=PieceStatus.SUCCESS).order_by("index")[:rest])
        url = reverse("admin:django_cluster_cron_run_retry_pieces", args=[run.pk])

        def retry(piece: JobPiece) -> SafeString | str:
            if piece.status != PieceStatus.FAILED:
                return ""
            return format_html(
                '<button type="submit" formaction="{}" formmethod="post" name="index" '
                'value="{}" class="dcc-tool">Retry</button>',
                url,
                piece.index,
            )

        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td><td>{}</td></tr>",
            (
                (
                    "completion" if piece.index < 0 else piece.index,
                    "" if piece.key is None else str(piece.key)[:60],
                    piece.status,
                    piece.attempt,
                    piece.worker or "—",
                    duration_text(piece.duration),
                    (piece.error or piece.result)[:200],
                    retry(piece),
                )
                for piece in shown
            ),
        )
        more = found.count() - len(shown)
        return format_html(
            '<table class="dcc-pieces"><thead><tr><th>index</th><th>key</th><th>status</th>'
            "<th>attempt</th><th>worker</th><th>took</th><th>error or result</th><th></th>"
            "</tr></thead><tbody>{}</tbody></table>{}",
            rows,
            format_html("<p>…and {} more that succeeded.</p>", more) if more > 0 else "",
        )

    def piece_urls(self) -> list[Any]:
        retry = self.admin_site.admin_view(self.retry_pieces_view)
        return [path("<int:pk>/retry-pieces/", retry, name="django_cluster_cron_run_retry_pieces")]

    def posted_run(self, request: HttpRequest, pk: int, allowed: bool) -> JobRun | HttpResponse:
        """The run a button of its page acts on: refused without ``allowed`` (403), for a
        method other than POST (405, the answer returned), for no such run (404)."""
        if not allowed:
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        run = self.get_object(request, str(pk))
        if run is None:
            raise Http404
        return run  # type: ignore[no-any-return]

    def retry_pieces_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """POST: retry the failed piece ``index`` (every failed piece without one)."""
        run = self.posted_run(request, pk, self.has_retry_permission(request))
        if isinstance(run, HttpResponse):
            return run
        raw = request.POST.get("index", "")
        index = whole_number(raw) if raw else None
        if raw and index is None:
            self.message_user(request, f"{raw[:20]!r} is not a piece index.", messages.ERROR)
        else:
            try:
                run = actions.retry_pieces(run, None if index is None else [index])
            except ActionRefused as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                which = "every failed piece" if index is None else f"piece {index}"
                self.log_change(request, run, f"Retried {which}.")
                self.message_user(request, f"Run {run.pk}: {which} sent again.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:django_cluster_cron_jobrun_change", args=[pk]))
