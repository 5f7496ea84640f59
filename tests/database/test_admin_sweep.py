"""Any input in any field of the admin's job form is saved or shown back with an error on a
field; the admin never answers with a server error."""

from __future__ import annotations

import itertools
import json

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from django_cluster_cron.models import JobDefinition
from tests.database.test_admin import VALID

pytestmark = pytest.mark.django_db

ADD = reverse("admin:django_cluster_cron_jobdefinition_add")
# Every field the form writes, as the browser posts them (a split date-time is two inputs).
FIELDS = sorted(VALID)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=30,
)
TEXT = st.text(
    # A browser cannot send a lone surrogate in a form; everything else can be typed or pasted.
    st.characters(exclude_categories=["Cs"]),
    max_size=300,
)
ODD = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "x\u202e\u200b",
        "9" * 400,
        "-1",
        "1e309",
        "NaN",
        "x" * 100_000,
        "[" * 5000 + "]" * 5000,
        '{"a": ' * 3000 + "1" + "}" * 3000,
        "[" * 100 + "]" * 100,
        "2024-13-45",
        "25:99:99",
        "99999999 00:00:00",
        "*/15 * * * * *",
        "@reboot",
    ]
)
VALUES = st.one_of(TEXT, ODD, JSON_VALUES.map(json.dumps))
_names = itertools.count(1)


def _post(client, field: str, value: str):
    data = {**VALID, "name": f"sweep-{next(_names)}", field: value}
    return client.post(ADD, data)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(FIELDS), value=VALUES)
@example(field="args", value="[" * 5000 + "]" * 5000)
@example(field="kwargs", value='{"a": "' + "\U0001f600" * 20_000 + '"}')
@example(field="jitter", value="1" * 20)  # the refused value reached the preview: OverflowError
def test_any_value_in_any_field_is_saved_or_refused_on_a_field(admin_client, field, value):
    before = JobDefinition.all_objects.count()
    response = _post(admin_client, field, value)
    assert response.status_code in (200, 302), response.status_code
    if response.status_code == 302:
        assert JobDefinition.all_objects.count() == before + 1
        return
    form = response.context["adminform"].form
    assert form.errors, f"{field}={value[:80]!r} was neither saved nor refused"
    assert all(messages for messages in form.errors.values())
    assert JobDefinition.all_objects.count() == before
