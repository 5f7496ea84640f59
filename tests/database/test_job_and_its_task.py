"""A job fits its task when it is saved: the task is one the project has, and is told apart
(a Celery task, a ``django.tasks`` task, a plain function, nothing); the arguments fit the task's
signature; the priority is in the range of the task's execution system; a time limit is refused
where nothing could enforce it; a catch-up window says the format it takes. Each refusal is on
its own field, in the admin's and the API's words alike (both call the model's ``full_clean``).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.urls import reverse

from django_cluster_cron.models import JobDefinition

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        not django_settings.HAS_DJANGO_TASKS, reason="django-tasks-db is not installed"
    ),
]

RECORD = "tests.testapp.dtasks.record"  # record(label, seconds=0.0), a django.tasks task


def plain(label: str) -> str:
    """A function a user may name by mistake: not decorated with any @task."""
    return label


def errors_of(**fields):
    values = {"name": "fit", "cron": "0 3 * * *", "timezone": "UTC", **fields}
    with pytest.raises(ValidationError) as caught:
        JobDefinition(**values).full_clean()
    return caught.value.message_dict


def valid(**fields):
    job = JobDefinition(name="fit", cron="0 3 * * *", timezone="UTC", **fields)
    job.full_clean()
    job.save()
    return job


@pytest.fixture
def no_celery_app(settings):
    """A project with no Celery app: CELERY_APP unset, celery.current_app Celery's default."""
    from celery import Celery, current_app

    previous = current_app._get_current_object()  # type: ignore[attr-defined]
    settings.CLUSTER_CRON = {k: v for k, v in settings.CLUSTER_CRON.items() if k != "CELERY_APP"}
    Celery(set_as_current=True)
    yield
    previous.set_current()


# -- the task: what the name names --------------------------------------------------------------


def test_a_plain_function_is_told_it_is_not_a_task():
    [message] = errors_of(task=f"{__name__}.plain", args=["x"])["task"]
    assert f"'{__name__}.plain'" in message, message
    assert "it is a function, not a @task" in message, message
    assert "decorate it with @task" in message


def test_a_plain_function_in_a_project_without_celery_is_told_the_same(no_celery_app):
    [message] = errors_of(task=f"{__name__}.plain", args=["x"])["task"]
    assert "is a function, not a @task" in message, message
    assert "not registered in the Celery app" not in message


def test_without_a_celery_app_an_unknown_task_does_not_count_celerys_tasks(no_celery_app):
    [message] = errors_of(task="tests.testapp.dtasks.nope")["task"]
    assert "it has 0 tasks" not in message, message
    assert "not registered in the Celery app" not in message
    assert "is not the path of a django.tasks task" in message
    assert 'does not define a "nope"' in message  # why the path names nothing
    assert "no Celery app is configured" in message


def test_the_path_of_a_celery_task_registered_under_another_name_says_that_name():
    [message] = errors_of(task="tests.testapp.tasks.add", args=[1, 2])["task"]
    assert "the Celery task registered as 'tests.add'" in message, message


def test_a_django_tasks_job_saves_in_a_project_without_celery(no_celery_app):
    valid(task=RECORD, args=["x"])


# -- the arguments fit the task's signature -----------------------------------------------------


@pytest.mark.parametrize(
    ("task", "args", "kwargs", "field", "words"),
    [
        ("tests.add", [1, 2, 3], {}, "args", "too many positional arguments"),
        ("tests.add", [1], {}, "args", "nothing gives y"),
        ("tests.add", [], {}, "args", "nothing gives x, y"),
        ("tests.add", [1, 2], {"z": 3}, "kwargs", "unexpected keyword argument 'z'"),
        ("tests.add", [1], {"x": 2}, "kwargs", "multiple values for argument 'x'"),
        ("tests.stamp", [True, 2], {}, "args", "too many positional arguments"),  # bound: self
        (RECORD, [], {}, "args", "nothing gives label"),
        (RECORD, ["a", 1.0, 2], {}, "args", "too many positional arguments"),
        (RECORD, ["a"], {"other": 1}, "kwargs", "unexpected keyword argument 'other'"),
        # takes_context: the context is the backend's, not an argument of the job's.
        ("tests.testapp.dtasks.with_context", ["a", "b"], {}, "args", "too many positional"),
    ],
)
def test_arguments_that_do_not_fit_the_tasks_signature_are_refused_on_their_field(
    task, args, kwargs, field, words
):
    errors = errors_of(task=task, args=args, kwargs=kwargs)
    assert set(errors) == {field}, errors
    [message] = errors[field]
    assert words in message, message
    assert f"Task {task!r} takes (" in message, message


@pytest.mark.parametrize(
    ("task", "args", "kwargs"),
    [
        ("tests.add", [1, 2], {}),
        ("tests.add", [1], {"y": 2}),
        ("tests.add", [], {"x": 1, "y": 2}),
        ("tests.echo", [1, 2, 3], {"any": "thing"}),  # *args, **kwargs: anything fits
        ("tests.stamp", [True], {}),
        (RECORD, ["a"], {"seconds": 0.5}),
        ("tests.testapp.dtasks.with_context", ["a"], {}),
    ],
)
def test_arguments_that_fit_are_accepted(task, args, kwargs):
    valid(task=task, args=args, kwargs=kwargs)


def test_the_admin_shows_a_misfit_on_the_arguments_field(admin_client):
    from tests.database.test_admin import VALID

    data = {**VALID, "task": "tests.add", "args": "[1, 2, 3]"}
    response = admin_client.post(reverse("admin:django_cluster_cron_jobdefinition_add"), data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "too many positional arguments" in str(errors["args"]), errors


# -- priority: each execution system's range ----------------------------------------------------


def test_a_django_tasks_job_takes_a_priority_below_zero():
    job = valid(task=RECORD, args=["x"], priority=-100)
    job.refresh_from_db()
    assert job.priority == -100


def test_a_django_tasks_priority_outside_its_range_is_refused_by_the_backend():
    [message] = errors_of(task=RECORD, args=["x"], priority=101)["priority"]
    assert "refuses priority 101" in message, message
    # Below any system's range: the field's own words, once.
    [message] = errors_of(task=RECORD, args=["x"], priority=-101)["priority"]
    assert message == "Ensure this value is greater than or equal to -100."


def test_a_celery_job_refuses_a_priority_below_zero():
    [message] = errors_of(task="tests.add", args=[1, 2], priority=-1)["priority"]
    assert "Celery message priorities are 0 and up" in message, message


# -- time limits: Celery's only -----------------------------------------------------------------


@pytest.mark.parametrize("field", ["time_limit", "soft_time_limit"])
def test_a_time_limit_on_a_django_tasks_job_is_refused(field):
    errors = errors_of(task=RECORD, args=["x"], **{field: 30})
    assert set(errors) == {field}, errors
    assert "django.tasks task cannot be stopped at a time limit" in errors[field][0]


def test_a_celery_job_keeps_its_time_limits():
    valid(task="tests.add", args=[1, 2], soft_time_limit=10, time_limit=20)


# -- the catch-up window's format ---------------------------------------------------------------


def test_a_catch_up_window_in_a_format_it_does_not_take_says_the_format(admin_client):
    from tests.database.test_admin import VALID

    data = {**VALID, "catchup_window": "2h"}
    response = admin_client.post(reverse("admin:django_cluster_cron_jobdefinition_add"), data)
    assert response.status_code == 200
    [message] = response.context["adminform"].form.errors["catchup_window"]
    assert "HH:MM:SS" in message, message
    assert "a number of seconds (7200)" in message, message
    [message] = errors_of(task="tests.add", args=[1, 2], catchup_window="2h")["catchup_window"]
    assert "HH:MM:SS" in message, message


@pytest.mark.parametrize("typed", ["7200", "02:00:00", "0 02:00:00"])
def test_the_formats_the_message_names_are_the_ones_the_field_takes(admin_client, typed):
    from tests.database.test_admin import VALID

    data = {**VALID, "catchup_window": typed}
    response = admin_client.post(reverse("admin:django_cluster_cron_jobdefinition_add"), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert JobDefinition.objects.get(name=VALID["name"]).catchup_window == timedelta(hours=2)


def test_a_window_of_zero_says_the_format_too():
    [message] = errors_of(task="tests.add", args=[1, 2], catchup_window=timedelta(0))[
        "catchup_window"
    ]
    assert "longer than zero" in message
    assert "HH:MM:SS" in message, message


# -- the help texts name both execution systems -------------------------------------------------


def test_the_admin_describes_task_queue_and_priority_for_both_systems(admin_client):
    page = admin_client.get(reverse("admin:django_cluster_cron_jobdefinition_add"))
    text = page.content.decode()
    for field in ("task", "queue", "priority"):
        help_text = str(getattr(JobDefinition._meta.get_field(field), "help_text", ""))
        assert "django.tasks" in help_text, (field, help_text)
        assert "Celery" in help_text, (field, help_text)
        assert help_text in text, field
    assert "-100" in str(getattr(JobDefinition._meta.get_field("priority"), "help_text", ""))
