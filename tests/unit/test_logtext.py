"""Log injection: text that operators or tasks control cannot start a log line of its own."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from django_cluster_cron.ops import logtext

PACKAGE = Path(logtext.__file__).parents[1]


def test_every_logger_the_code_writes_to_gets_the_filter():
    used = set()
    for path in PACKAGE.rglob("*.py"):
        used.update(re.findall(r"getLogger\(\s*\"(django_cluster_cron[\w.]*)\"", path.read_text()))
    assert used, "no logger names found: the scan is broken"
    assert used <= set(logtext.LOGGERS), sorted(used - set(logtext.LOGGERS))
    logtext.install()
    for name in logtext.LOGGERS:
        assert any(isinstance(f, logtext.OneLine) for f in logging.getLogger(name).filters)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (
            "nightly\n2026-11-27 INFO run.dispatched job=evil",
            "nightly\\n2026-11-27 INFO run.dispatched job=evil",
        ),
        ("a\r\nb", "a\\r\\nb"),
        ("bell\x07 and esc\x1b[31m", "bell\\x07 and esc\\x1b[31m"),
        ("line\u2028sep", "line\\u2028sep"),
        ("tab\tstays, é stays", "tab\tstays, é stays"),
    ],
)
def test_control_characters_in_logged_values_are_escaped(caplog, raw, shown):
    logtext.install()
    logger = logging.getLogger("django_cluster_cron.worker")
    with caplog.at_level(logging.INFO, logger="django_cluster_cron.worker"):
        logger.info("run.failed job=%s error=%s", raw, ValueError(raw))
        logger.info("lock.%(what)s name=%(name)s", {"what": "taken", "name": raw})
    first, second = caplog.records[-2:]
    assert first.getMessage() == f"run.failed job={shown} error={shown}"
    assert second.getMessage() == f"lock.taken name={shown}"
    assert "\n" not in first.getMessage() + second.getMessage()
