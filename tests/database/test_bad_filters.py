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


# -- a change list's URL filters by its own filters, nothing else ---------------------------------

REFUSED = [
    ("jobrun", {"scheduled_for__year": HUGE}),
    ("jobrun", {"scheduled_for__month": "13"}),
    ("jobrun", {"job": HUGE}),
    ("jobrun", {"job_id": HUGE}),
    ("jobrun", {"job__in": HUGE}),
    ("jobrun", {"id__in": f"1,{HUGE}"}),
    ("jobrun", {"error__icontains": "password"}),
    ("jobrun", {"job__kwargs__api_key": "x"}),
    ("jobdefinition", {"catchup_window": "abc"}),
    ("jobdefinition", {"id__in": HUGE}),
    ("jobdefinition", {"kwargs__api_key__startswith": "sk_"}),
    ("jobdefinition", {"args__0__token": "t"}),
    ("jobdefinition", {"task__startswith": "tests"}),
]


@pytest.mark.parametrize(("model", "query"), REFUSED)
def test_a_change_list_refuses_a_url_lookup_none_of_its_filters_makes(admin_client, model, query):
    answer = admin_client.get(f"/admin/django_cluster_cron/{model}/", query)
    assert answer.status_code == 400


ALLOWED = [
    ("jobrun", {"scheduled_for__year": "2026", "scheduled_for__month": "11"}),
    ("jobrun", {"status__exact": "failed", "trigger__exact": "manual"}),
    ("jobdefinition", {"enabled__exact": "1", "task__exact": "tests.echo"}),
    ("jobdefinition", {"catchup_policy__exact": "all", "overlap_policy__exact": "skip"}),
]


@pytest.mark.parametrize(("model", "query"), ALLOWED)
def test_a_change_list_takes_what_its_filters_make(admin_client, model, query):
    assert admin_client.get(f"/admin/django_cluster_cron/{model}/", query).status_code == 200
