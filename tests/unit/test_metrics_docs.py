"""The metrics reference, the alert rules and the Grafana dashboard agree with the code.

Every metric the app registers is in docs/reference/metrics.md (and nothing else is); every
metric the rules and the dashboard query exists; the rules are valid YAML in Prometheus's shape,
and pass ``promtool check rules`` when Debian's ``prometheus`` package provides it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RULES = DOCS / "monitoring" / "alerts.yml"
RULE_TESTS = DOCS / "monitoring" / "alerts.test.yml"
DASHBOARD = DOCS / "monitoring" / "grafana-dashboard.json"


def exported_families() -> list[object]:
    """Every metric family the app defines, registered in a registry of their own."""
    import prometheus_client

    from django_cluster_cron.ops import metrics

    registry = CollectorRegistry()
    made: list[object] = []
    originals = {}
    for kind in ("Counter", "Gauge", "Histogram"):
        originals[kind] = getattr(prometheus_client, kind)

        def make(*args, _kind=kind, **kwargs):
            kwargs["registry"] = registry
            metric = originals[_kind](*args, **kwargs)
            made.append(metric)
            return metric

        setattr(prometheus_client, kind, make)
    try:
        for role in metrics.ROLE_MEMBERS:  # the scheduler's and the workers'
            role()
    finally:
        for kind, original in originals.items():
            setattr(prometheus_client, kind, original)
    return made


def exported_names() -> set[str]:
    """The names Prometheus sees for every metric the app defines (counters get ``_total``)."""
    names = set()
    for metric in exported_families():
        name = str(metric._name)  # type: ignore[attr-defined]
        suffix = "_total" if metric._type == "counter" else ""  # type: ignore[attr-defined]
        names.add(name + suffix)
    return names


def documented_names() -> set[str]:
    text = (DOCS / "reference" / "metrics.md").read_text()
    return set(re.findall(r"^\| `(cluster_cron_\w+)` \|", text, re.M))


def queried_names(text: str) -> set[str]:
    found = set(re.findall(r"\bcluster_cron_\w+", text))
    # Histogram series are queried through their _bucket/_count/_sum series.
    return {re.sub(r"_(bucket|count|sum)$", "", name) for name in found}


def test_every_metric_is_documented_and_nothing_else():
    exported = exported_names()
    assert len(exported) >= 15
    assert exported == documented_names()


def test_no_metric_uses_a_label_prometheus_sets_on_its_targets():
    """``job`` and ``instance`` are Prometheus's: a series of ours with either would have it
    renamed ``exported_job`` on scrape, and every query on it would match nothing."""
    from django_cluster_cron.ops.metrics import RESERVED_LABELS

    assert {"job", "instance"} <= RESERVED_LABELS
    for metric in exported_families():
        labels = set(metric._labelnames)  # type: ignore[attr-defined]
        assert not labels & RESERVED_LABELS, (metric, labels)


def test_names_follow_prometheus_conventions():
    for name in exported_names():
        assert name.startswith("cluster_cron_")
        assert re.fullmatch(r"[a-z_]+", name), name


def test_the_alert_rules_are_well_formed_and_use_real_metrics():
    rules = yaml.safe_load(RULES.read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    names = {rule["alert"] for rule in alerts}
    assert {"ClusterCronNoLeader", "ClusterCronPublishLatencyHigh", "ClusterCronRunsWaiting"} <= (
        names
    )
    assert "ClusterCronJobNotSucceeding" in names  # the dead-man's switch
    for rule in alerts:
        assert rule["expr"].strip()
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert rule["annotations"]["summary"]
    assert queried_names(RULES.read_text()) <= exported_names()


def test_the_dashboard_is_valid_json_and_uses_real_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 10
    assert queried_names("\n".join(exprs)) <= exported_names()
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian: prometheus)")
def test_promtool_accepts_the_rules():
    checked = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian: prometheus)")
def test_each_alert_fires_on_its_series_and_not_on_healthy_ones():
    """``promtool test rules``: for every alert a series that must fire it and one that must
    not (docs/monitoring/alerts.test.yml)."""
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    rules = yaml.safe_load(RULES.read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    fired = {
        case["alertname"]
        for test in tests
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    quiet = {
        case["alertname"]
        for test in tests
        for case in test["alert_rule_test"]
        if not case["exp_alerts"]
    }
    assert fired == alerts, "every alert needs a series that fires it"
    assert quiet == alerts, "every alert needs a series that does not fire it"
    checked = subprocess.run(
        ["promtool", "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
