"""The API's audit context: a request's changes are its authenticated user's, and the context is
left when the request ends, a server error included (its user must not be the actor of the
thread's next change)."""

from __future__ import annotations

from unittest import mock

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIRequestFactory, force_authenticate

from django_cluster_cron import audit
from django_cluster_cron.api.views import JobViewSet

pytestmark = pytest.mark.django_db


def listing(user: User):
    request = APIRequestFactory().get("/jobs/")
    force_authenticate(request, user=user)
    return request


def test_the_request_acts_as_its_user_and_leaves_no_actor_behind_even_on_a_server_error():
    user = User.objects.create_superuser("boss", "boss@example.com", "pw")
    view = JobViewSet.as_view({"get": "list"})
    seen: list[audit.Actor] = []

    def fails(self, request, *args, **kwargs):
        seen.append(audit.current())
        raise RuntimeError("a bug in the view")

    with mock.patch.object(JobViewSet, "list", fails), pytest.raises(RuntimeError):
        view(listing(user))
    assert [(actor.name, actor.via, actor.user_id) for actor in seen] == [("boss", "api", user.pk)]
    assert audit.current() == audit.Actor()

    assert view(listing(user)).status_code == 200
    assert audit.current() == audit.Actor()
