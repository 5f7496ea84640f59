"""What the API reads from a query string: paging, booleans, choices, numbers and instants, each
refused with a ``400`` naming the parameter rather than ignored (DRF ignores a bad page number)."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination, LimitOffsetPagination
from rest_framework.request import Request

from ..validation import MAX_WHOLE, whole_number


def page_number(request: Request, name: str, default: int | None, cap: int | None) -> int | None:
    """A paging parameter, refused when it is not a whole number >= 0 (DRF would ignore it)."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    value = integer(raw, name)
    if value < 0 or (name == "limit" and value == 0):
        raise ValidationError({name: [f"{value} is out of range."]})
    return min(value, cap) if cap is not None else value


class JobPagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 500

    def get_limit(self, request: Request) -> int | None:
        return page_number(request, self.limit_query_param, self.default_limit, self.max_limit)

    def get_offset(self, request: Request) -> int:
        return page_number(request, self.offset_query_param, 0, None) or 0


class RunPagination(CursorPagination):
    """Cursor pagination: stable and cheap however large the ledger grows."""

    ordering = ("-scheduled_for", "-id")
    page_size = 50
    max_page_size = 500
    page_size_query_param = "limit"

    def get_page_size(self, request: Request) -> int | None:
        return page_number(request, "limit", self.page_size, self.max_page_size)

    def get_ordering(self, request: Request, queryset: Any, view: Any) -> tuple[str, ...]:
        # One job's slots are unique: no tie for the id to break (and MySQL/MariaDB then read
        # the job's (job, slot) index in order instead of sorting all its runs).
        if request.query_params.get("job"):
            return ("-scheduled_for",)
        return tuple(self.ordering)


def flag(value: str | None, name: str, default: bool | None = False) -> bool | None:
    if value is None:
        return default
    lowered = value.lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise ValidationError({name: [f"'{value}' is not a boolean: use true or false."]})


def text(value: str, name: str) -> str:
    if "\x00" in value:  # no database column can hold it; PostgreSQL refuses it outright
        raise ValidationError({name: ["must not contain a NUL (\\x00) character."]})
    return value


def choice(value: str, name: str, choices: list[str]) -> str:
    if value not in choices:
        raise ValidationError(
            {name: [f"{text(value, name)!r} is not one of: {', '.join(choices)}."]}
        )
    return value


def integer(value: str, name: str) -> int:
    """A whole number the database can hold (64-bit), else a 400 naming ``name``."""
    found = whole_number(value)
    if found is None:
        shown = text(value, name)[:40]
        raise ValidationError(
            {name: [f"'{shown}' is not a whole number between {-MAX_WHOLE - 1} and {MAX_WHOLE}."]}
        )
    return found


# RFC 3339 date-time, as the schema's "date-time" format says: seconds and an offset required.
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def instant(value: str, name: str) -> datetime:
    from django.utils.dateparse import parse_datetime

    parsed = None
    if RFC3339.fullmatch(value):
        try:
            # In UTC: databases refuse some offsets Python accepts (PostgreSQL: beyond 15:59).
            parsed = parse_datetime(value)
            parsed = parsed.astimezone(timezone.utc) if parsed is not None else None
        except (ValueError, OverflowError):
            parsed = None
    if parsed is None:
        raise ValidationError(
            {name: [f"'{value}' is not an RFC 3339 date and time, e.g. 2026-11-24T09:00:00Z."]}
        )
    return parsed
