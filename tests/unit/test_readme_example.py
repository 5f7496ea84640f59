"""The README's example of the time core gives what its comment says it gives."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

from django_cluster_cron.schedule import fire_times

README = Path(__file__).resolve().parents[2] / "README.md"
# The call, then a comment line listing the instants it returns ("2024-11-03 05:30Z").
EXAMPLE = re.compile(r"^(fire_times\(.*\))\n# (.*)$", re.MULTILINE)
INSTANT = re.compile(r"(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2})Z")


def test_the_fire_times_example_returns_the_instants_its_comment_lists() -> None:
    found = EXAMPLE.search(README.read_text(encoding="utf-8"))
    assert found, "the README's fire_times example (a call, then a comment line) is gone"
    call, comment = found.groups()
    expected = [
        datetime.fromisoformat(f"{day}T{time}:00+00:00") for day, time in INSTANT.findall(comment)
    ]
    assert expected, f"no instant in the comment {comment!r}"
    names = {"fire_times": fire_times, "datetime": datetime, "timezone": timezone}
    # The README's own line, from the repository.
    assert eval(call, names) == expected
