"""The base of the admin pages that only show what the cluster records: the run ledger and the
cluster status page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Nobody adds, changes or deletes rows here, superusers included (a run changes through its
    actions, retry and cancel); who may look is each page's own ``has_view_permission``."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
