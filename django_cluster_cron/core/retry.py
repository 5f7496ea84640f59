"""Retry timing: exponential backoff with jitter. Pure; the caller passes the random source."""

from __future__ import annotations

import random


def retry_delay(
    failed_attempt: int,
    *,
    base: float,
    cap: float,
    jitter: bool = True,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before the attempt after ``failed_attempt`` (1 for the first failure).

    The un-jittered delay doubles per attempt, ``base * 2**(failed_attempt - 1)``, up to ``cap``.
    With jitter the delay is drawn from its upper half, so retries of many runs that failed
    together spread out while each delay still grows with the attempt.
    """
    if failed_attempt < 1:
        raise ValueError(f"failed_attempt must be >= 1, got {failed_attempt}")
    delay = float(min(cap, base * 2.0 ** min(failed_attempt - 1, 62)))
    if not jitter or delay <= 0:
        return delay
    return delay / 2 + float((rng or random).uniform(0, delay / 2))
