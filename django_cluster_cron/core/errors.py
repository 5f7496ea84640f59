"""The one exception type of the pure core.

It is a ``ValueError`` (so ``fire_times`` keeps its documented contract,
docs/reference/python-api.md) that also says *which* input was wrong, so a Django form or model
can attach the message to the right field.
"""

from __future__ import annotations


class ScheduleError(ValueError):
    """An invalid schedule input.

    ``field`` names the input that is wrong (``"cron"``, ``"timezone"``, ``"after"``, ``"limit"``,
    ``"catchup_window"`` ...) and the message says what value was given and why it is refused.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
