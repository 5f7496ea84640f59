"""Nothing a request sends is dropped without a word, and no input can become a ``500``.

- :class:`StrictBody`: a serializer that refuses, under the field's own name, every field it does
  not write — an unknown field, or a read-only one whose value differs from the current one (a
  client may send back unchanged what it read) — and a body that is not a JSON object.
- :class:`JSONValueField`: a JSON value (a job's ``args``/``kwargs``) that a database column and a
  JSON reply can hold: no NUL character or lone surrogate, no infinite number, bounded nesting.
- :func:`printable_errors`: error replies whose text can always be encoded (an error may quote
  the input, and a lone surrogate in it would make the reply itself fail).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import cached_property
from typing import Any

from django.utils.dateparse import parse_datetime
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail
from rest_framework.fields import empty
from rest_framework.response import Response
from rest_framework.settings import api_settings

from ..validation import UNSTORABLE, json_problem
from .parsers import loads

MAX_SHOWN = 60  # characters of a value quoted back in a message
MAX_MESSAGE = 1000  # characters of any message in an error reply


def shown(value: Any) -> str:
    """A value as compact JSON for a message: ASCII (so always encodable) and cut short."""
    try:
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=str)
    except (ValueError, RecursionError):
        text = "(a value)"
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


def printable(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` with lone surrogates written as ``\\udXXX`` escapes, cut to ``limit``."""
    if UNSTORABLE.search(text):
        text = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    return "null" if value is None else "object"


def _same(sent: Any, current: Any) -> bool:
    """Whether a read-only field's sent value is its current one: the same JSON value (``true``
    is not ``1``), a date and time at the same instant in any RFC 3339 spelling."""
    if isinstance(sent, bool) or isinstance(current, bool):
        return type(sent) is type(current) and sent == current
    if isinstance(sent, (int, float)) and isinstance(current, (int, float)):
        return bool(sent == current)
    if isinstance(sent, str) and isinstance(current, str):
        return sent == current or _same_instant(sent, current)
    return type(sent) is type(current) and sent == current


def _same_instant(sent: str, current: str) -> bool:
    try:
        a, b = parse_datetime(sent), parse_datetime(current)
    except ValueError:
        return False
    return isinstance(a, datetime) and isinstance(b, datetime) and a.tzinfo is not None and a == b


class StrictBody(serializers.Serializer):  # type: ignore[type-arg]
    """A request body that is a JSON object, every field of which is written or refused.

    ``body_of`` names what the body is for in messages ("a job", "pause/"); a view may pass
    ``context={"body_of": ...}`` instead.
    """

    body_of = "this request"

    @property
    def _body_of(self) -> str:
        return str(self.context.get("body_of", self.body_of))

    def run_validation(self, data: Any = empty) -> Any:
        if data is None or (data is not empty and not isinstance(data, Mapping)):
            raise serializers.ValidationError(
                {
                    api_settings.NON_FIELD_ERRORS_KEY: [
                        f"The body of {self._body_of} must be a JSON object of its fields, "
                        f"not a JSON {json_kind(data)}."
                    ]
                }
            )
        stray = {} if data is empty else self.stray_fields(data)
        try:
            value = super().run_validation(data)
        except serializers.ValidationError as exc:
            if stray and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **stray}) from None
            raise
        if stray:
            raise serializers.ValidationError(stray)
        return value

    def stray_fields(self, data: Mapping[str, Any]) -> dict[str, list[str]]:
        """An error for each field of ``data`` this serializer would not write."""
        writable = [name for name, field in self.fields.items() if not field.read_only]
        errors: dict[str, list[str]] = {}
        for key in data:
            field = self.fields.get(key)
            if field is not None and not field.read_only:
                continue
            if field is None:
                errors[printable(str(key), 100)] = [self._unknown(writable)]
                continue
            message = self._read_only(key, data[key])
            if message:
                errors[key] = [message]
        return errors

    def _unknown(self, writable: list[str]) -> str:
        if not writable:
            return f"{self._body_of} takes no body: leave this field out."
        return f"Not a field of {self._body_of}, which takes: {', '.join(writable)}."

    def _read_only(self, name: str, sent: Any) -> str | None:
        if self.instance is None:
            return "Read-only: the server sets it. Leave it out."
        current = self._current.get(name)
        if _same(sent, current):
            return None
        return (
            f"Read-only: it is {shown(current)} and this request says {shown(sent)}. "
            "Leave it out, or send it unchanged."
        )

    @cached_property
    def _current(self) -> dict[str, Any]:
        return dict(self.to_representation(self.instance))


class EmptyBody(StrictBody):
    """The body of an action that takes none: nothing, or ``{}``."""


class JSONValueField(serializers.JSONField):
    """A JSON value the database and a JSON reply can hold, from a JSON body or a form field.

    Refused under the field's name: a form field's text that is not JSON, and what
    :func:`~django_cluster_cron.validation.json_problem` finds (too deep, a NUL character or a
    lone surrogate, which PostgreSQL's ``jsonb`` refuses, a number that is not finite).
    """

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str) and getattr(data, "is_json_string", False):
            try:
                data = loads(data)
            except ValueError as exc:
                raise serializers.ValidationError(f"Not valid JSON: {exc}.") from None
        if not isinstance(data, (dict, list, str, int, float, bool)) and data is not None:
            raise serializers.ValidationError(f"A {type(data).__name__} is not a JSON value.")
        problem = json_problem(data)
        if problem:
            raise serializers.ValidationError(f"{problem[0].upper()}{problem[1:]}.")
        return data


def _printable_data(data: Any) -> Any:
    if isinstance(data, dict):
        return {printable(str(key), 100): _printable_data(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_printable_data(item) for item in data]
    if isinstance(data, str):
        text = printable(data)
        return ErrorDetail(text, data.code) if isinstance(data, ErrorDetail) else text
    return data


Handler = Callable[[Exception, dict[str, Any]], "Response | None"]


def printable_errors(handler: Handler) -> Handler:
    """The project's exception handler, with every message of its reply made encodable."""

    def handle(exc: Exception, context: dict[str, Any]) -> Response | None:
        response = handler(exc, context)
        if response is not None and response.data is not None:
            response.data = _printable_data(response.data)
        return response

    return handle
