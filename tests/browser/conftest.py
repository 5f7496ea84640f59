"""Playwright driving the system's Chromium (Debian's `chromium` package) headless.

No browser is downloaded: Playwright's own `install` cannot reach the internet here, and CI
installs Chromium with apt-get. Without a Chromium the browser tests are skipped with a message
saying so; every other test runs regardless.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import cluster, lease_kind  # noqa: F401 (fixtures)

# Playwright's sync API runs an event loop in the test thread; Django's ORM (used by the test
# itself to check the database) refuses to run in a thread with a running loop unless told.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OUTPUT = Path(
    os.environ.get("TEST_OUTPUT_DIR") or Path(__file__).resolve().parents[2] / ".test-output"
)


def chromium_path() -> str | None:
    explicit = os.environ.get("CHROMIUM_BIN")
    if explicit:
        return explicit
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    if executable is None:
        pytest.skip("browser tests need Chromium: apt-get install chromium (or set CHROMIUM_BIN)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_FLAGS
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def screenshot_dir() -> Path:
    path = OUTPUT / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path
