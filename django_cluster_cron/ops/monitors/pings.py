"""Ping URLs, as healthchecks.io and its kin take them: ``<url>/start``, ``<url>``, ``<url>/fail``.

Each job's URL comes from a template (``{slug}``: the monitor's slug, ``{job}``: the job's name,
URL-quoted) or from a per-job table; a job with neither is not pinged. The suffix of each kind of
ping is an option; ``None`` sends no ping of that kind. The attempt's check-in id goes along as
``?rid=`` (healthchecks pairs a start with its end by it and measures the run time), and a
failure's error text as the request body.

Pings leave the worker's path: they are queued (bounded; a full queue drops the ping and logs
``monitors.ping_dropped``) and sent by one daemon thread per process, with a short timeout. A
failed ping is logged (``monitors.ping_failed``), never raised, never retried: the next one
carries the news. The thread starts with the first ping in each process, so a Celery pool
process that forked from its parent starts its own. :meth:`PingSink.flush` waits for the queue.
The standard library's ``urllib`` sends them; nothing else is needed.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

from .base import CheckIn, Monitor, MonitorSink

logger = logging.getLogger("django_cluster_cron.monitors")

# healthchecks.io's endpoints. A retried attempt's failure is a failure; "/log" (an event in
# the check's log that changes nothing) keeps retries quiet. A skipped run counts as a success.
DEFAULT_SUFFIXES: dict[str, str | None] = {
    "start": "/start",
    "success": "",
    "fail": "/fail",
    "retry": "/fail",
    "skip": "",
}
BODY_LIMIT = 10_000


@dataclass(frozen=True)
class Ping:
    url: str
    body: bytes | None = None


def _kind(check_in: CheckIn) -> str:
    if check_in.status == "in_progress":
        return "start"
    if check_in.outcome == "skipped":
        return "skip"
    if check_in.status == "ok":
        return "success"
    return "retry" if check_in.retried else "fail"


def with_suffix(url: str, suffix: str, params: Mapping[str, str]) -> str:
    """``suffix`` added to the URL's path (before any query it has), ``params`` to its query."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/") + suffix if suffix else parts.path
    query = "&".join(
        [parts.query] * bool(parts.query) + [f"{k}={quote(v, safe='')}" for k, v in params.items()]
    )
    return urlunsplit((parts.scheme, parts.netloc, path, query, parts.fragment))


class Pinger:
    """One daemon thread per process sending queued pings in order."""

    def __init__(self, timeout: float, size: int) -> None:
        self.timeout = timeout
        self.size = size
        self._lock = threading.Lock()
        self._pid = 0
        self._queue: queue.Queue[Ping] = queue.Queue(size)

    def submit(self, ping: Ping) -> None:
        with self._lock:
            if self._pid != os.getpid():  # first ping here, or a forked child of the starter
                self._pid = os.getpid()
                self._queue = queue.Queue(self.size)
                name = "cluster-cron-pings"
                threading.Thread(
                    target=self._work, args=(self._queue,), name=name, daemon=True
                ).start()
            pending = self._queue
        try:
            pending.put_nowait(ping)
        except queue.Full:
            logger.warning(
                "monitors.ping_dropped url=%s: %s pings are waiting", ping.url, self.size
            )

    def _work(self, pending: queue.Queue[Ping]) -> None:
        while True:
            ping = pending.get()
            try:
                self.send(ping)
            finally:
                pending.task_done()

    def send(self, ping: Ping) -> None:
        method = "GET" if ping.body is None else "POST"
        request = urllib.request.Request(ping.url, data=ping.body, method=method)
        request.add_header("User-Agent", "django-cluster-cron")
        if ping.body is not None:
            request.add_header("Content-Type", "text/plain; charset=utf-8")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read(1024)
        except Exception as exc:  # a monitor that cannot be told must not stop the next ping
            logger.warning("monitors.ping_failed url=%s error=%s", ping.url, exc)

    def flush(self, timeout: float) -> bool:
        """Wait until every queued ping was sent or failed; False after ``timeout`` seconds."""
        pending = self._queue
        deadline = time.monotonic() + timeout
        with pending.all_tasks_done:
            while pending.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                pending.all_tasks_done.wait(left)
        return True


class PingSink(MonitorSink):
    """Options: ``url`` (a template with ``{slug}`` or ``{job}``), ``urls`` (job name -> URL,
    before the template), ``suffixes`` (kind -> path suffix or None: ``start``, ``success``,
    ``fail``, ``retry``, ``skip``), ``run_id_param`` (``"rid"``; None sends none), ``timeout``
    (seconds per ping, 5), ``queue_size`` (1000)."""

    def __init__(
        self,
        url: str | None = None,
        urls: Mapping[str, str] | None = None,
        suffixes: Mapping[str, str | None] | None = None,
        run_id_param: str | None = "rid",
        timeout: float = 5.0,
        queue_size: int = 1000,
    ) -> None:
        if url is None and not urls:
            raise ValueError("give 'url' (a template with {slug} or {job}) or 'urls'")
        if url is not None:
            try:
                url.format(slug="slug", job="job")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"url may use {{slug}} and {{job}} only: {exc!r}") from None
        self.url = url
        self.urls = dict(urls or {})
        for candidate in [url, *self.urls.values()]:
            if candidate is not None and urlsplit(candidate).scheme not in ("http", "https"):
                raise ValueError(f"ping URLs must be http:// or https://, not {candidate!r}")
        unknown = set(suffixes or {}) - set(DEFAULT_SUFFIXES)
        if unknown:
            raise ValueError(
                f"unknown ping kinds {sorted(unknown)}; known: {list(DEFAULT_SUFFIXES)}"
            )
        self.suffixes = {**DEFAULT_SUFFIXES, **(suffixes or {})}
        self.run_id_param = run_id_param
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 1:
            raise ValueError(f"queue_size must be a whole number >= 1, not {queue_size!r}")
        self.pinger = Pinger(float(timeout), queue_size)

    def ping_for(self, monitor: Monitor, check_in: CheckIn) -> Ping | None:
        """The ping this check-in sends, or None (no URL for the job, or no suffix for it)."""
        suffix = self.suffixes[_kind(check_in)]
        base = self.urls.get(monitor.job)
        if base is None and self.url is not None:
            base = self.url.format(slug=quote(monitor.slug), job=quote(monitor.job, safe=""))
        if base is None or suffix is None:
            return None
        params = {self.run_id_param: check_in.check_in_id} if self.run_id_param else {}
        body = check_in.error.encode()[:BODY_LIMIT] if check_in.status == "error" else None
        return Ping(with_suffix(base, suffix, params), body)

    def started(self, monitor: Monitor, check_in: CheckIn) -> None:
        self._submit(monitor, check_in)

    def finished(self, monitor: Monitor, check_in: CheckIn) -> None:
        self._submit(monitor, check_in)

    def _submit(self, monitor: Monitor, check_in: CheckIn) -> None:
        ping = self.ping_for(monitor, check_in)
        if ping is not None:
            self.pinger.submit(ping)

    def flush(self, timeout: float) -> bool:
        return self.pinger.flush(timeout)
