"""What a change list may be filtered by through its URL: the filters it shows, nothing else.

Django lets a change list's query string filter on any of the model's own fields, JSON paths
included (``?kwargs__api_key__startswith=sk_``): a user who may view jobs could read a masked
argument one character at a time, and a number past what the database holds answered 500. Here a
URL may use only the parameters of the list's own filters and date drill-down, with values that
make sense; anything else is Django's ``400`` (a disallowed lookup).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.filters import SimpleListFilter
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest

# Parts of a date drill-down's parameters, and the values each may take.
DATE_PARTS = {"year": (1, 9999), "month": (1, 12), "day": (1, 31)}


def list_lookup_allowed(
    model_admin: admin.ModelAdmin[Any], lookup: str, value: Any, request: HttpRequest | None
) -> bool:
    """Whether ``lookup=value`` in a change list's URL comes from one of its own filters."""
    filters = model_admin.get_list_filter(request) if request is not None else ()
    parameters, fields = set(), set()
    for item in filters:
        if isinstance(item, type) and issubclass(item, SimpleListFilter):
            parameters.add(item.parameter_name)  # the filter checks its own value
        else:
            fields.add(item[0] if isinstance(item, (list, tuple)) else item)
    if lookup in parameters:
        return True
    field, _, rest = lookup.partition(LOOKUP_SEP)
    if field == model_admin.date_hierarchy and rest in DATE_PARTS:
        low, high = DATE_PARTS[rest]
        text = str(value).strip()
        return text.isdigit() and low <= int(text) <= high
    return field in fields and rest in ("", "exact", "isnull")
