"""One real `run_scheduler` process's health from outside: its probe endpoints (/livez, /readyz,
/healthz) and systemd's readiness and watchdog notifications.

The cluster's health (``cluster_health``, the JSON view, the command) and the probes' logic
are tests/database/test_health.py; the HTTP server's limits on their own,
tests/unit/test_httpserve.py.
"""

from __future__ import annotations

import json
import re
import selectors
import socket
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest

from django_cluster_cron.dbtime import database_now
from django_cluster_cron.models import JobRun, RunStatus
from django_cluster_cron.ops.httpserve import MAX_CONNECTIONS
from tests.support.cluster import every_second_job, sent_by
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.any_database, pytest.mark.django_db(transaction=True)]


@pytest.mark.timeout(120)
def test_run_scheduler_serves_probes_and_pings_the_systemd_watchdog(cluster, tmp_path: Path):
    notify_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify_path))
    sock.settimeout(20)
    try:
        cluster.start("probed", NOTIFY_SOCKET=str(notify_path), WATCHDOG_USEC="10000000")
        messages = {sock.recv(64).decode() for _ in range(3)}
    finally:
        sock.close()
    assert "READY=1" in messages
    assert "WATCHDOG=1" in messages


@pytest.mark.timeout(120)
def test_the_probe_endpoints_of_a_real_scheduler(cluster):
    cluster.start("probed", args=["--health-port", "0", "--health-host", "127.0.0.1"])
    port = wait_for(
        lambda: re.findall(r"health.listening port=(\d+)", cluster.log("probed")),
        30,
        "the probe server to listen",
    )[0]
    base = f"http://127.0.0.1:{port}"

    def get(path):
        try:
            with urllib.request.urlopen(base + path, timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def live():
        status, body = get("/livez")
        return body if status == 200 else None

    body = wait_for(live, 60, "/livez to answer 200")
    assert body["node"] == "probed"
    assert body["alive"] is True
    assert body["seconds_since_last_pass"] < 5
    wait_for(lambda: get("/readyz")[1].get("role") == "leader", 60, "it to lead")
    assert get("/healthz")[0] == 200
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(base + "/nope", timeout=5)
    assert missing.value.code == 404


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE)
    assert found is not None, status
    return int(found[1])


class Flood:
    """Silent and slow connections held open to some ports: each slow one sent a partial request
    line and adds a byte a second. Whatever the server closes is opened again, once a second."""

    def __init__(self, ports: list[int], idle: int, slow: int) -> None:
        self.selector = selectors.DefaultSelector()
        self.wanted = [(port, False) for port in ports for _ in range(idle)]
        self.wanted += [(port, True) for port in ports for _ in range(slow)]
        self.socks: dict[socket.socket, tuple[int, bool]] = {}
        self.opened = self.closed_by_server = 0

    def fill(self) -> None:
        for port, slow in self.wanted:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                if slow:
                    sock.sendall(b"GET /livez HT")
            except OSError:
                continue  # the server closed it already: opened again next time
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ)
            self.socks[sock] = (port, slow)
            self.opened += 1
        self.wanted = []

    def drop(self, sock: socket.socket) -> None:
        self.wanted.append(self.socks.pop(sock))
        self.selector.unregister(sock)
        sock.close()

    def dribble(self) -> None:
        for sock, (_port, slow) in list(self.socks.items()):
            if slow:
                try:
                    sock.send(b"T")
                except OSError:
                    self.closed_by_server += 1
                    self.drop(sock)

    def hold(self, seconds: float, sample) -> None:
        """Keep the flood up for ``seconds``, calling ``sample()`` between reads."""
        end = time.monotonic() + seconds
        refill = time.monotonic()
        while time.monotonic() < end:
            if time.monotonic() >= refill:
                self.fill()
                self.dribble()
                refill = time.monotonic() + 1
            for key, _events in self.selector.select(0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.closed_by_server += 1
                    self.drop(sock)
            sample()

    def close(self) -> None:
        for sock in list(self.socks):
            self.selector.unregister(sock)
            sock.close()
        self.socks.clear()
        self.selector.close()


@pytest.mark.timeout(240)
def test_a_flood_of_connections_to_both_ports_does_not_stop_dispatch(cluster):
    """Hundreds of silent and slow connections to the probe and metrics ports of a leading
    scheduler: it keeps sending every slot of a job firing every second, its thread count stays
    within the two servers' caps, and it answers its probes once the flood is over."""
    job = every_second_job("flooded")
    proc = cluster.start(
        "flooded",
        args=["--health-port", "0", "--health-host", "127.0.0.1", "--metrics-port", "0"],
    )

    def log():
        return cluster.log("flooded")

    health = int(
        wait_for(lambda: re.findall(r"health.listening port=(\d+)", log()), 60, "probes")[0]
    )
    scrape = int(
        wait_for(lambda: re.findall(r"metrics.listening port=(\d+)", log()), 60, "metrics")[0]
    )
    wait_for(lambda: sent_by("flooded", job), 60, "the node to lead and send", detail=log)
    normal = max(threads_of(proc.pid) for _ in range(5))
    most = [normal]

    flood = Flood([health, scrape], idle=150, slow=20)
    start = database_now()
    sent_before = JobRun.objects.filter(job=job, queued_at__isnull=False).count()
    try:
        flood.hold(12, lambda: most.append(threads_of(proc.pid)))
        end = database_now()
        sent_during = JobRun.objects.filter(job=job, queued_at__isnull=False).count() - sent_before
    finally:
        flood.close()

    # Its first wave alone leaves all but MAX_CONNECTIONS of each port's connections turned away.
    first_wave = 2 * (150 + 20 - MAX_CONNECTIONS)
    assert flood.closed_by_server >= first_wave, "the flood was not turned away"
    # At most MAX_CONNECTIONS served on each of the two ports; a thread of the scheduler's own
    # may come and go meanwhile.
    assert max(most) <= normal + 2 * MAX_CONNECTIONS + 2, (normal, max(most))
    flooded = (end - start).total_seconds()
    assert sent_during >= flooded / 2, f"{sent_during} runs sent in a {flooded:.1f}s flood"
    assert proc.poll() is None

    wait_for(
        lambda: JobRun.objects.filter(
            job=job, scheduled_for__gte=end, queued_at__isnull=False
        ).exists(),
        60,
        "the slot after the flood to be sent",
        detail=log,
    )
    window = JobRun.objects.filter(job=job, scheduled_for__gte=start, scheduled_for__lte=end)
    slots = sorted(window.values_list("scheduled_for", flat=True))
    first = start.replace(microsecond=0)
    if first < start:
        first += timedelta(seconds=1)
    expected = [first + timedelta(seconds=i) for i in range(int((end - first).total_seconds()) + 1)]
    assert slots == expected, "a slot of the flood has no run, or more than one"
    assert not window.filter(status=RunStatus.MISSED).exists()

    def live():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/livez", timeout=5) as answer:
                return answer.status == 200
        except OSError:
            return False

    wait_for(live, 60, "/livez to answer 200 after the flood", detail=log)
    with urllib.request.urlopen(f"http://127.0.0.1:{scrape}/metrics", timeout=5) as answer:
        assert answer.status == 200
    assert "health.busy" in log()
    assert "metrics.busy" in log()
