"""One real `run_scheduler` process's health from outside: its probe endpoints (/livez, /readyz,
/healthz) and systemd's readiness and watchdog notifications.

The cluster's health (``cluster_health``, the JSON view, the command) and the probes' logic
are tests/database/test_health.py.
"""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


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
