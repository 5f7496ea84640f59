"""How long the ledger keeps a job's finished runs: a period per final status and the last N of
each status kept however old, from the project's settings and the job's own overrides.

Pure: the settings and the job's fields come in as plain values; what comes out says, for one
job and one status, the slot before which a run may go (:meth:`Retention.cutoff`) and how many of
the newest must stay (:meth:`Retention.keep`). A bad value raises :class:`RetentionError`
naming the status and the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

__all__ = [
    "DEFAULT_BY_STATUS",
    "FINAL",
    "MAX_DAYS",
    "MAX_KEEP_LAST",
    "Retention",
    "RetentionError",
    "parse_days",
    "parse_keep_last",
    "resolve",
]

# The statuses a run ends in, the only ones ever pruned (a run waiting or running never is).
FINAL = ("success", "failed", "skipped", "missed", "cancelled", "uncertain")
# What the project keeps of a status it names no period for, beyond its default period: failures
# (and runs whose fate was lost) are what an operator comes back to.
DEFAULT_BY_STATUS: Mapping[str, int] = {"failed": 90, "uncertain": 90}
MAX_DAYS = 36_500
MAX_KEEP_LAST = 100_000


class RetentionError(ValueError):
    """A retention setting that cannot be applied; the message names the status and value."""


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _status(name: Any) -> str:
    if not isinstance(name, str) or name not in FINAL:
        raise RetentionError(
            f"{name!r} is not a final run status; give one of {', '.join(FINAL)} "
            "(runs still waiting or running are never pruned)."
        )
    return name


def parse_days(value: Any) -> dict[str, int | None]:
    """``{status: days}`` from a mapping of final statuses to a number of days (1 to
    36,500), or None for "kept for ever"."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RetentionError(
            'Give an object of final statuses and days, e.g. {"success": 7, "failed": 365}.'
        )
    days: dict[str, int | None] = {}
    for name, period in value.items():
        status = _status(name)
        if period is not None and (not _whole(period) or not 1 <= period <= MAX_DAYS):
            raise RetentionError(
                f"The period of {status} runs must be a whole number of days from 1 to "
                f"{MAX_DAYS:,}, or null to keep them for ever; got {period!r}."
            )
        days[status] = period
    return days


def parse_keep_last(value: Any) -> dict[str, int]:
    """``{status: count}`` from a count for every final status, or a mapping of final statuses
    to counts (0 to 100,000)."""
    if value is None:
        return {}
    if _whole(value):
        return dict.fromkeys(FINAL, _count("every status", value))
    if not isinstance(value, Mapping):
        raise RetentionError(
            "Give a number of runs kept per status (e.g. 10), or an object of final statuses "
            'and numbers (e.g. {"failed": 20}).'
        )
    return {_status(name): _count(name, count) for name, count in value.items()}


def _count(status: str, count: Any) -> int:
    if not _whole(count) or not 0 <= count <= MAX_KEEP_LAST:
        raise RetentionError(
            f"The runs kept of {status} must be a whole number from 0 to {MAX_KEEP_LAST:,}; "
            f"got {count!r}."
        )
    return int(count)


@dataclass(frozen=True)
class Retention:
    """One job's retention: days kept per final status (None: for ever) and the newest runs of
    each final status kept however old."""

    days: Mapping[str, int | None] = field(default_factory=dict)
    keep_last: Mapping[str, int] = field(default_factory=dict)

    def cutoff(self, status: str, now: datetime) -> datetime | None:
        """Runs of ``status`` whose slot is before this may be pruned (None: none may)."""
        period = self.days.get(status)
        return None if period is None else now - timedelta(days=period)

    def keep(self, status: str) -> int:
        return self.keep_last.get(status, 0)

    def describe(self) -> str:
        """In words, statuses kept alike together: ``success, skipped, missed, cancelled: 30
        days; failed, uncertain: 90 days; the newest 10 of each kept however old``."""
        groups: dict[int | None, list[str]] = {}
        for status in FINAL:
            groups.setdefault(self.days.get(status), []).append(status)
        parts = [
            f"{', '.join(names)}: " + ("kept for ever" if days is None else _days(days))
            for days, names in groups.items()
        ]
        kept = {self.keep(status) for status in FINAL}
        if kept == {0}:
            pass
        elif len(kept) == 1:
            parts.append(f"the newest {kept.pop():,} of each kept however old")
        else:
            parts.append(
                "kept however old: "
                + ", ".join(f"the newest {self.keep(s):,} {s}" for s in FINAL if self.keep(s))
            )
        return "; ".join(parts)

    def longest(self) -> int | None:
        """The longest period of any final status, in days (None: some status is kept for
        ever)."""
        periods = [self.days.get(status) for status in FINAL]
        return None if None in periods else max(p for p in periods if p is not None)


def _days(days: int) -> str:
    return "1 day" if days == 1 else f"{days:,} days"


def resolve(
    *,
    default_days: int,
    by_status: Any = None,
    keep_last: Any = 0,
    job_days: Any = None,
    job_keep_last: Any = None,
) -> Retention:
    """A job's retention: the project's period (``default_days`` for every final status,
    :data:`DEFAULT_BY_STATUS` and then ``by_status`` over it), then the job's ``job_days`` over
    that; the project's ``keep_last``, then the job's ``job_keep_last`` over it."""
    days: dict[str, int | None] = dict.fromkeys(FINAL, default_days)
    days.update({s: max(p, default_days) for s, p in DEFAULT_BY_STATUS.items()})
    days.update(parse_days(by_status))
    days.update(parse_days(job_days))
    kept = dict.fromkeys(FINAL, 0)
    kept.update(parse_keep_last(keep_last))
    kept.update(parse_keep_last(job_keep_last))
    return Retention(days=days, keep_last=kept)
