"""A thread's own database connection, kept open for the thread's life.

Django hands each thread one connection per database alias, and others close it: Celery's Django
fixup closes every connection of the worker's thread before and after each task (whatever
``CONN_MAX_AGE`` says), and ``CONN_MAX_AGE = 0`` closes it after each request. Statements that
run again and again from one thread — a lease renewed every few seconds, a worker's claim and
record of each run — would then pay for a new connection every time. This module makes one
connection per thread and alias with Django's own connection handler (the same settings, the
same test database), outside the handler, so nothing else closes it; in autocommit, so it is
never inside a caller's transaction. A caller that sees a database error closes it
(:func:`close_own_connection`) and the next use reconnects.
"""

from __future__ import annotations

import contextlib
import threading

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper


class _Own(threading.local):
    def __init__(self) -> None:
        self.wrappers: dict[str, BaseDatabaseWrapper] = {}


_own = _Own()


def own_connection(alias: str) -> BaseDatabaseWrapper:
    """This thread's own connection to ``alias``, connected and in autocommit."""
    wrapper = _own.wrappers.get(alias)
    if wrapper is None:
        wrapper = connections.create_connection(alias)
        _own.wrappers[alias] = wrapper
    wrapper.ensure_connection()
    if not wrapper.get_autocommit():
        wrapper.set_autocommit(True)
    return wrapper


def own_wrapper(alias: str) -> BaseDatabaseWrapper | None:
    """This thread's own connection to ``alias`` if it has made one (not connecting)."""
    return _own.wrappers.get(alias)


def close_own_connection(alias: str | None = None) -> None:
    """Close this thread's own connection to ``alias`` (every alias: None); harmless if none."""
    aliases = list(_own.wrappers) if alias is None else [alias]
    for name in aliases:
        wrapper = _own.wrappers.pop(name, None)
        if wrapper is not None:
            with contextlib.suppress(DatabaseError):
                wrapper.close()


def forget_inherited() -> None:
    """In a process just forked: drop (without closing: the parent's socket) what the parent's
    thread had made."""
    _own.wrappers = {}
