"""An id or number typed into a URL that no database column can hold (or no number at all) is
refused where it arrives: the admin shows the list again with Django's "?e=1", the API answers
400 naming the parameter. It used to reach the database and overflow there (500 on SQLite)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

HUGE = "1" * 30
BAD = [HUGE, "-" + HUGE, "9223372036854775808", "abc", "1.5", "0x10"]


@pytest.mark.parametrize("value", BAD)
def test_the_admins_run_list_refuses_a_job_filter_that_is_no_id(admin_client, value):
    answer = admin_client.get("/admin/django_cluster_cron/jobrun/", {"job__id__exact": value})
    assert answer.status_code == 302
    assert answer["Location"].endswith("?e=1")


def test_the_admins_run_list_takes_a_job_filter_that_is_an_id(admin_client):
    answer = admin_client.get(
        "/admin/django_cluster_cron/jobrun/", {"job__id__exact": "9223372036854775807"}
    )
    assert answer.status_code == 200


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize(
    ("path", "name"), [("runs/", "job"), ("runs/", "limit"), ("jobs/", "offset")]
)
def test_the_api_refuses_a_number_no_column_holds_with_a_400_naming_it(
    admin_client, path, name, value
):
    answer = admin_client.get(f"/cron/api/{path}", {name: value})
    assert answer.status_code == 400, answer.content
    assert name in answer.json()


@pytest.mark.parametrize("path", ["jobs", "runs"])
def test_the_api_answers_404_for_an_id_no_column_holds(admin_client, path):
    assert admin_client.get(f"/cron/api/{path}/{HUGE}/").status_code == 404
