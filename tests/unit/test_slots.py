from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_cluster_cron.schedule import ScheduleError, parse_task_id, task_id_for

UTC = timezone.utc


def test_task_id_is_readable_and_names_job_and_slot():
    assert task_id_for(42, datetime(2024, 3, 10, 7, tzinfo=UTC)) == "cron-42-20240310T070000Z"


def test_the_same_slot_in_another_offset_gives_the_same_id():
    slot = datetime(2024, 3, 10, 7, tzinfo=UTC)
    berlin = slot.astimezone(timezone(timedelta(hours=1)))
    assert task_id_for(7, berlin) == task_id_for(7, slot)


def test_different_jobs_or_slots_give_different_ids():
    slot = datetime(2024, 1, 1, tzinfo=UTC)
    ids = {task_id_for(1, slot), task_id_for(2, slot), task_id_for(1, slot + timedelta(seconds=1))}
    assert len(ids) == 3


@given(
    job=st.integers(0, 2**63),
    slot=st.datetimes(
        min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
)
def test_parse_inverts_task_id_for(job, slot):
    assert parse_task_id(task_id_for(job, slot)) == (job, slot)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "cron-1-2024",
        "cron-x-20240101T000000Z",
        "celery-1-20240101T000000Z",
        "cron-1-20241301T000000Z",
        None,
    ],
)
def test_parse_rejects_foreign_ids(bad):
    assert parse_task_id(bad) is None


def test_naive_slots_and_bad_job_ids_are_refused():
    with pytest.raises(ScheduleError, match="timezone-aware"):
        task_id_for(1, datetime(2024, 1, 1))
    with pytest.raises(ScheduleError, match="job id"):
        task_id_for(-1, datetime(2024, 1, 1, tzinfo=UTC))
    with pytest.raises(ScheduleError, match="job id"):
        task_id_for("1", datetime(2024, 1, 1, tzinfo=UTC))  # type: ignore[arg-type]
