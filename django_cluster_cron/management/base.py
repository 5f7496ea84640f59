"""What every ``manage.py`` command of the app shares: its version, and option types whose
errors say what is wrong in the operator's words."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import django
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from django_cluster_cron import __version__


class ClusterCronCommand(BaseCommand):
    # Commands that report an unreachable database themselves (run_scheduler waits for it and
    # --once exits 1 naming it; cluster_health reports it) go on when the checks cannot reach it.
    checks_survive_database_down = False

    def get_version(self) -> str:
        """``--version`` names this app, not only Django."""
        return f"django-cluster-cron {__version__} (Django {django.get_version()})"

    def check(self, *args: Any, **kwargs: Any) -> None:
        """Django's system checks, minus a traceback when the database is unreachable (Django
        6.1's checks read the database's features, so they connect)."""
        try:
            super().check(*args, **kwargs)
        except DatabaseError as exc:
            if self.checks_survive_database_down:
                return
            raise CommandError(f"The database cannot be reached: {exc}") from exc


def seconds_above_zero(value: str) -> float:
    """A duration in seconds, greater than zero (``1.5`` is fine)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {value}")
    return number


def whole_number(minimum: int) -> Callable[[str], int]:
    """A whole number of at least ``minimum``."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
        return number

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def port(value: str) -> int:
    """A TCP port, or 0 for one the system picks."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 (pick a free one) to 65535, got {value}")
    return number
