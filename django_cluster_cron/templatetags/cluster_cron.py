"""Template filters of the app's admin pages: ``{% load cluster_cron %}``."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils.safestring import SafeString

from ..admin.display import UTC
from ..admin.display import moment as render_moment
from ..core.errors import ScheduleError
from ..core.timezones import get_zone

register = template.Library()


@register.filter
def moment(value: datetime | str | None, zone: str = "") -> SafeString | str:
    """``{{ when|moment }}`` in UTC, ``{{ when|moment:job.timezone }}`` in the job's zone: to the
    second, the zone's abbreviation, UTC on hover (the admin's one rule for timestamps)."""
    try:
        shown = get_zone(zone) if zone else UTC
    except ScheduleError:
        shown = UTC
    return render_moment(value, shown)
