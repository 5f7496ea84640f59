"""Tasks the suite schedules. Explicit names: jobs refer to them by name."""

from __future__ import annotations

import time
from typing import Any

from celery import shared_task


@shared_task(name="tests.add")
def add(x: int, y: int) -> int:
    return x + y


@shared_task(name="tests.echo")
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@shared_task(name="tests.fail")
def fail() -> None:
    raise RuntimeError("tests.fail always raises")


@shared_task(name="tests.sleep")
def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds
