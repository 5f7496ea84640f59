"""One version everywhere a user reads it: the package, the commands' ``--version``, the top of
the changelog and the upgrade page (issue 44: the wheel said 0.1.0 while the docs called 0.1 the
old release)."""

from __future__ import annotations

import re
from pathlib import Path

import django_cluster_cron

ROOT = Path(__file__).resolve().parents[2]


def release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_the_changelog_opens_with_the_packages_version():
    first = re.search(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert first is not None
    assert first.group(1).split()[0] == django_cluster_cron.__version__, first.group(0)


def test_the_upgrade_page_names_this_release_and_only_older_ones_as_old():
    text = (ROOT / "docs/how-to/upgrade.md").read_text()
    current = release(django_cluster_cron.__version__)
    assert f"{django_cluster_cron.__version__} is the release these docs describe" in text
    sources = [release(found) for found in re.findall(r"^## From (\d+\.\d+)", text, re.M)]
    assert sources
    assert all(source < current[:2] for source in sources), sources
    # "From 0.2 …" names this release's minor version (what changed with it).
    targets = {release(found) for found in re.findall(r"\bFrom (\d+\.\d+) (?:a|the)\b", text)}
    assert targets <= {current[:2]}, targets


def test_every_command_says_the_packages_version():
    from django_cluster_cron.management.base import ClusterCronCommand

    assert django_cluster_cron.__version__ in ClusterCronCommand().get_version()
