"""How a setting is declared and read: :class:`Setting`, one descriptor per key of
``settings.CLUSTER_CRON``, and :class:`SettingsReader`, the object they are declared on.

A declaration holds the key's default, its parser (raising ``ValueError`` with what was
expected) and its documentation; the attribute's type is the parser's return type. The value is
read from the project's settings at every access, so ``override_settings`` works in tests.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, ClassVar, Generic, NoReturn, TypeVar, overload

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

SETTINGS_NAME = "CLUSTER_CRON"

T = TypeVar("T")

# Values that cannot change in place: one seen before is the same setting.
_IMMUTABLE = (str, int, float, bool, type(None))


def _shareable(parsed: object) -> bool:
    """Whether one parsed value can be handed to every reader (nothing in it can change)."""
    if isinstance(parsed, tuple):
        return all(isinstance(item, _IMMUTABLE) for item in parsed)
    return isinstance(parsed, (*_IMMUTABLE, timedelta))


class Setting(Generic[T]):
    """One key of ``settings.CLUSTER_CRON``, declared as a class attribute of the settings.

    ``default`` is used when the project does not set the key; ``parse`` turns the project's
    value into the attribute's (raising ``ValueError`` that says what was expected); ``doc`` is
    what the key does, in the words of the settings reference. ``none_means``, for a key whose
    parsed value may be None, computes the value None stands for from the other settings.
    """

    name: str

    @overload
    def __init__(self, default: Any, parse: Callable[[object], T], doc: str) -> None: ...

    @overload
    def __init__(
        self,
        default: Any,
        parse: Callable[[object], T | None],
        doc: str,
        *,
        none_means: Callable[[Any], Any],
    ) -> None: ...

    def __init__(
        self,
        default: Any,
        parse: Callable[[object], Any],
        doc: str,
        *,
        none_means: Callable[[Any], Any] | None = None,
    ) -> None:
        self.default = default
        self.parse = parse
        self.doc = doc
        self.none_means = none_means

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<Setting {getattr(self, 'name', '?')} (default {self.default!r})>"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Setting[T]: ...

    @overload
    def __get__(self, obj: SettingsReader, owner: type | None = None) -> T: ...

    def __get__(self, obj: SettingsReader | None, owner: type | None = None) -> Any:
        if obj is None:
            return self  # on the class: the declaration itself
        value = obj.get(self.name)
        if value is None and self.none_means is not None:
            return self.none_means(obj)
        return value

    def __set__(self, obj: SettingsReader, value: NoReturn) -> NoReturn:
        # Read-only, as the project's settings are the one place a value is set.
        raise AttributeError(f"{SETTINGS_NAME}[{self.name!r}] is read from the project's settings")


class SettingsReader:
    """Typed, read-at-access-time view of ``settings.CLUSTER_CRON``: subclasses declare the keys
    as :class:`Setting` attributes (collected, in order, in :attr:`declared`).

    A value is parsed once and the result reused while the project's value stays what it was
    (the same object; for a list or dict, also equal to a copy taken when it was parsed, so a
    test that changes one in place is seen). A worker reads several settings for every run.
    """

    declared: ClassVar[dict[str, Setting[Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = {name: value for name, value in vars(cls).items() if isinstance(value, Setting)}
        cls.declared = {**cls.declared, **own}

    def __init__(self) -> None:
        # name -> (the raw value parsed, a copy of it if it can change in place, the result)
        self._parsed: dict[str, tuple[object, object, Any]] = {}

    @staticmethod
    def raw() -> Mapping[str, object]:
        value = getattr(settings, SETTINGS_NAME, {})
        if not isinstance(value, Mapping):
            raise ImproperlyConfigured(f"settings.{SETTINGS_NAME} must be a dict.")
        return value

    def get(self, name: str) -> Any:
        """The parsed value of one key (None stays None: see ``Setting.none_means``)."""
        setting = self.declared[name]
        value = self.raw().get(name, setting.default)
        seen = self._parsed.get(name)
        if seen is not None and seen[0] is value and (seen[1] is _IMMUTABLE or seen[1] == value):
            return seen[2]
        try:
            parsed = setting.parse(value)
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"settings.{SETTINGS_NAME}[{name!r}] is {value!r}; expected {exc}."
            ) from None
        if not _shareable(parsed):  # a caller may change what it got: parse at every read
            return parsed
        if isinstance(value, _IMMUTABLE):
            self._parsed[name] = (value, _IMMUTABLE, parsed)
        else:
            try:
                self._parsed[name] = (value, copy.deepcopy(value), parsed)
            except Exception:  # a value no copy can be taken of is parsed at every read
                self._parsed.pop(name, None)
        return parsed
