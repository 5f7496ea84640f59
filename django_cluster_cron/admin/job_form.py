"""The job form: its fields and their errors, the live preview of the schedule, and the small
forms of the operator actions (pause, backfill)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, cast

from django import forms
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.forms.fields import InvalidJSONInput
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..celery_app import registered_task_names
from ..core.catchup import PLAIN
from ..core.cron import seconds_first_habit
from ..core.errors import ScheduleError
from ..core.timezones import available_timezones
from ..core.timing import SlotTiming
from ..describe import preview
from ..models import DEFINITION_FIELDS, JobDefinition, OverlapPolicy
from ..redaction import ARGUMENT_FIELDS, redact, restore
from ..validation import MAX_JITTER
from ..validation.jsontext import EXAMPLES as JSON_EXAMPLES
from ..validation.jsontext import parse_json

PREVIEW_COUNT = 10
# Longer than any valid cron (200) or zone name; the parser reports what is wrong below that.
PREVIEW_INPUT_LIMIT = 300


def preview_html(
    cron: str,
    zone: str,
    now: datetime,
    timing: SlotTiming = PLAIN,
    exclusions: list[str] | None = None,
) -> SafeString:
    """The schedule in words and its next runs in the zone and in UTC, with DST notes.

    With a job's active period and jitter (``timing``), the list holds the slots it will really
    run and when each is dispatched; with exclusions, it says which dates they leave out, and why.
    """
    if not cron.strip():
        return format_html("{}", "Type a schedule to see its next runs.")
    try:
        found = preview(cron, zone, now, PREVIEW_COUNT, timing, exclusions)
    except ScheduleError as exc:
        return format_html('<p class="dcc-preview-error">No preview: {}</p>', exc)
    schedule, upcoming = found.schedule, found.upcoming
    jittered = timing.jitter > timedelta(0)
    rows = (
        (
            f"{due.astimezone(schedule.zone):%a %Y-%m-%d %H:%M:%S %Z}",
            f"{due:%Y-%m-%d %H:%M:%S} UTC",
            f"slot {slot.astimezone(schedule.zone):%H:%M:%S} + {(due - slot).seconds} s"
            if jittered
            else "",
            schedule.dst_note(slot) or "",
        )
        for slot, due in upcoming
    )
    notes = []
    habit = seconds_first_habit(cron)
    if habit:
        notes.append(habit)
    if timing.start_at and timing.start_at > now:
        notes.append(f"Starts {timing.start_at.astimezone(schedule.zone):%Y-%m-%d %H:%M:%S %Z}.")
    if timing.end_at:
        ended = timing.end_at < now
        ends = timing.end_at.astimezone(schedule.zone)
        notes.append(f"{'Ended' if ended else 'Ends'} {ends:%Y-%m-%d %H:%M:%S %Z}.")
    if not upcoming:
        notes.append("No more runs: the job is finished.")
    if found.excluded:
        listed = "; ".join(
            f"{reason}, first run skipped {fire.astimezone(schedule.zone):%a %H:%M %Z}"
            for fire, reason in found.excluded
        )
        notes.append(f"Excluded: {listed}.")
    return format_html(
        '<p>{}</p><p>{}</p><table class="dcc-upcoming"><thead><tr><th>{}</th><th>UTC</th>'
        "<th>{}</th><th>DST</th></tr></thead><tbody>{}</tbody></table>",
        found.words,
        " ".join(notes),
        zone,
        "jitter" if jittered else "",
        format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows),
    )


def timing_from_query(query: Any) -> SlotTiming:
    """The active period and jitter the job form holds (its unsaved values); ignores bad ones."""

    def when(name: str) -> datetime | None:
        parts = [query.get(f"{name}_0", ""), query.get(f"{name}_1", "")]
        if not parts[0]:
            return None
        try:
            return cast(datetime, forms.SplitDateTimeField(required=False).clean(parts))
        except ValidationError:
            return None

    try:
        jitter = min(max(int(query.get("jitter") or 0), 0), MAX_JITTER)
        key = max(int(query.get("job") or 0), 0)
    except ValueError:
        jitter, key = 0, 0
    start, end = when("start_at"), when("end_at")
    if start and end and end <= start:
        end = None
    return SlotTiming(start, end, timedelta(seconds=jitter), key if jitter else 0)


def task_suggestions(*, include_jobs: bool = True) -> list[tuple[str, str]]:
    """The tasks a job may name, each with the system it runs on: the Celery app's registered
    tasks (when the project has a Celery app), the ``django.tasks`` tasks of the installed apps'
    ``tasks`` modules, and (``include_jobs``) the tasks jobs already name; those
    ``TASK_ALLOWLIST`` admits."""
    from ..celery_app import configured, get_celery_app
    from ..conf import app_settings
    from ..djtasks_app import task_paths

    try:
        app = get_celery_app()
        celery = registered_task_names(app) if configured(app) else []
    except ImproperlyConfigured:
        celery = []
    found = dict.fromkeys(celery, "Celery task")
    for path in task_paths():
        found.setdefault(path, "django.tasks task")
    named = JobDefinition.objects.order_by().values_list("task", flat=True).distinct()
    for name in named if include_jobs else ():
        found.setdefault(name, "a job's task")
    return sorted((n, kind) for n, kind in found.items() if app_settings.task_allowed(n))


class TaskInput(forms.TextInput):
    """A task's name or import path, typed, with the tasks found offered as suggestions (an HTML
    datalist): a ``django.tasks`` task defined anywhere is named by its path."""

    LIST_ID = "dcc-task-suggestions"

    def __init__(self) -> None:
        super().__init__(attrs={"list": self.LIST_ID, "size": 60, "autocomplete": "off"})

    def render(self, name: str, value: Any, attrs: Any = None, renderer: Any = None) -> Any:
        options = format_html_join("", '<option value="{}">{}</option>', task_suggestions())
        field = super().render(name, value, attrs, renderer)
        return format_html('{}<datalist id="{}">{}</datalist>', field, self.LIST_ID, options)


def _help_text(field: str) -> str:
    return str(getattr(JobDefinition._meta.get_field(field), "help_text", ""))


def _timezone_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(available_timezones())]


class RulesText(forms.CharField):
    """A list of text rules typed one per line (commas also separate them)."""

    widget = forms.Textarea(attrs={"rows": 2, "cols": 60})

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return "\n".join(str(item) for item in value)
        return value

    def to_python(self, value: Any) -> Any:
        if isinstance(value, list):
            return value
        text = super().to_python(value) or ""
        return [rule.strip() for rule in re.split(r"[\n,]", text) if rule.strip()]

    def has_changed(self, initial: Any, data: Any) -> bool:
        return bool(self.to_python(initial or []) != self.to_python(data))


def rules_from_text(text: str) -> list[str]:
    """What the exclusions box holds, as the preview reads it."""
    return cast(list[str], RulesText(required=False).to_python(text))


class JSONText(forms.JSONField):
    """A JSON field whose parse error says where and what (Django's says "Enter a valid JSON.")."""

    def __init__(self, *args: Any, example: str = "", **kwargs: Any) -> None:
        self.example = example
        super().__init__(*args, **kwargs)

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and value.strip() and not self.disabled:
            parse_json(value, self.example)
        return super().to_python(value)

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:  # shown again as typed, with the error above
            return InvalidJSONInput(data)


class JobDefinitionForm(forms.ModelForm):  # type: ignore[type-arg]
    change_note = forms.CharField(
        required=False,
        max_length=500,
        label="Note for the history",
        help_text="Why you make this change (kept in the job's History with your name).",
        widget=forms.TextInput(attrs={"size": 60}),
    )

    class Meta:
        model = JobDefinition
        fields = ("name", "enabled", "pause_note", *DEFINITION_FIELDS)
        widgets = {  # noqa: RUF012
            "args": forms.Textarea(attrs={"rows": 2, "cols": 60}),
            "kwargs": forms.Textarea(attrs={"rows": 3, "cols": 60}),
            "description": forms.Textarea(attrs={"rows": 2, "cols": 60}),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A field read-only here (a job declared in code, a view-only user) is not in the form:
        # it is shown, never posted, so it is not added back as a required choice.
        if "task" in self.fields:
            self.fields["task"] = forms.CharField(
                max_length=200, widget=TaskInput(), help_text=_help_text("task")
            )
        for name, example in JSON_EXAMPLES.items():
            field = self.fields.get(name)
            if field is None:  # read-only here, as above
                continue
            self.fields[name] = JSONText(
                required=field.required,
                widget=field.widget,
                help_text=field.help_text,
                label=field.label,
                initial=field.initial,
                example=example,
            )
        for name in ARGUMENT_FIELDS:
            if name in self.fields and name in self.initial:
                # Shown with secret-looking values masked; a mask sent back keeps the value.
                self.initial[name] = redact(self.initial[name])
        if "exclusions" in self.fields:
            self.fields["exclusions"] = RulesText(
                required=False,
                label="Exclusions",
                help_text=_help_text("exclusions") + " One rule per line.",
            )
        if "timezone" in self.fields:
            self.fields["timezone"] = forms.ChoiceField(
                choices=_timezone_choices()
                + ([] if not self.data.get("timezone") else [(self.data["timezone"],) * 2]),
                initial="UTC",
                help_text=_help_text("timezone"),
            )

    def _restored(self, name: str) -> Any:
        stored = getattr(self.instance, name) if self.instance.pk else None
        return restore(self.cleaned_data.get(name), stored)

    def clean_args(self) -> Any:
        return self._restored("args")

    def clean_kwargs(self) -> Any:
        return self._restored("kwargs")


POLICY_HELP = {
    "catchup_policy": (
        "After an outage, which missed slots inside the catch-up window run: 'all' runs each "
        "(up to CATCHUP_CAP, the most recent), 'latest' runs only the most recent, 'none' runs "
        "only slots that are still on time. Slots not run are recorded as missed."
    ),
    "catchup_window": "How far back (HH:MM:SS) missed slots are considered after an outage.",
    "overlap_policy": (
        "'allow': runs may overlap. 'skip': a slot whose previous run is still waiting or "
        "running is recorded as skipped. 'buffer_one': at most one run waits behind the one "
        "running; further slots are skipped."
    ),
}


class BackfillForm(forms.Form):
    start = forms.DateTimeField(help_text="From (exclusive), in the server's time zone.")
    end = forms.DateTimeField(help_text="To (inclusive); must be in the past.")
    overlap_policy = forms.ChoiceField(
        choices=OverlapPolicy.choices,
        initial=OverlapPolicy.BUFFER_ALL,
        required=False,
        help_text="What the backfill's runs do while a run of it is going: by default they wait "
        "their turn and run one at a time, in slot order.",
    )


class PauseForm(forms.Form):
    note = forms.CharField(
        required=False, max_length=255, help_text="Optional: why, shown in the jobs list."
    )
