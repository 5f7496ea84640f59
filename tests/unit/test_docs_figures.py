"""Every figure the README and the docs quote is recorded or checked: the docs stay true.

Two kinds of figures, two rules:

* **Measured figures** (a time, a ratio, a rate, a size of memory) must be in the recorded results
  of bench/README.md. The convention that makes them easy to find: a paragraph or list item that
  quotes measurements links the section of bench/README.md they come from
  (``bench/README.md#<heading's anchor>``, relative or as a GitHub address), and every figure in
  it must appear in one of the sections it links. In the README's ``## Performance`` section this
  is required of every item; elsewhere it applies to every paragraph that links such a section.
  Each figure is held to the first such link after it, so a paragraph quoting two runs cites
  each after its own figures.
  Only the recorded results count: ``## Latest results`` and the sections after it, not the
  workloads' targets above them.
* **Defaults** (``LEASE_TTL`` (10 s), "heartbeat 10 s, lost after 60 s") must be the code's.
  The settings table itself is checked by tests/database/test_docs_reference.py; here, what the
  prose and the other tables say.

A figure is a number followed by a unit: ``7.69 s``, ``0.48 ms``, ``1.22 x``, ``111%``,
``92 MiB``, ``4,600 runs/s``, ``1 query``. Counts of jobs or runs ("10,000 jobs") are workloads,
not figures. A figure matches when its number, exactly as written, stands in the linked section
as a number of its own (``0.10`` does not match ``0.104``, nor ``2.2`` ``12.2``).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from django_cluster_cron.conf import DEFAULTS
from django_cluster_cron.leases.lock import ClusterLock

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "README.md"
README = ROOT / "README.md"
# The pages whose figures are held to these rules.
PAGES = [
    README,
    ROOT / "docs" / "index.md",
    ROOT / "docs" / "quickstart.md",
    ROOT / "docs" / "reference" / "metrics.md",
    ROOT / "docs" / "reference" / "settings.md",
    *sorted((ROOT / "docs" / "explanation").glob("*.md")),
]
FIRST_RESULTS = "Latest results"  # the first heading of bench/README.md's recorded results

UNIT = (
    r"runs/s|runs a second|runs per second|a second|per second|minutes|minute|min"
    r"|MiB|ms|s|%|\N{MULTIPLICATION SIGN}|x|queries|query"
)
FIGURE = re.compile(rf"(?<![\w.,])(\d{{1,3}}(?:,\d{{3}})+|\d+)(\.\d+)?\s?(?:{UNIT})(?![\w/])")
BENCH_LINK = re.compile(r"bench/README\.md#([\w-]+)")


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def without_code(text: str) -> str:
    """The text with fenced code blocks blanked out (their lines kept, so blocks stay apart)."""
    return re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.M | re.S)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def sections(text: str) -> dict[str, tuple[int, str]]:
    """Every heading's anchor -> (its level, its text up to the next heading as high or higher)."""
    text = without_code(text)
    headings = list(re.finditer(r"^(#{1,6}) (.+)$", text, re.M))
    found = {}
    for i, heading in enumerate(headings):
        level = len(heading.group(1))
        end = len(text)
        for later in headings[i + 1 :]:
            if len(later.group(1)) <= level:
                end = later.start()
                break
        found[anchor(heading.group(2))] = (level, text[heading.end() : end])
    return found


def recorded_sections() -> dict[str, str]:
    """bench/README.md's sections of recorded results, by anchor."""
    text = read(BENCH)
    first = re.search(rf"^## {re.escape(FIRST_RESULTS)}$", text, re.M)
    assert first, f"bench/README.md has no '## {FIRST_RESULTS}' heading: has it been renamed?"
    return {key: body for key, (_, body) in sections(text[first.start() :]).items()}


def figures(text: str) -> list[str]:
    """The figures in a piece of text: each number with its unit, as written."""
    return [match.group(0) for match in FIGURE.finditer(text)]


def number_of(figure: str) -> str:
    match = FIGURE.match(figure)
    assert match
    return match.group(1) + (match.group(2) or "")


def records(body: str, number: str) -> bool:
    """Whether ``number`` stands in ``body`` as a number of its own."""
    return re.search(rf"(?<![\d.,]){re.escape(number)}(?!\d|[.,]\d)", body) is not None


def blocks(text: str) -> list[str]:
    """Paragraphs, list items and table rows of a Markdown text, code left out."""
    found: list[str] = []
    current: list[str] = []
    for line in without_code(text).splitlines():
        starts_item = re.match(r"\s*(?:[*-]|\d+\.) ", line) or line.startswith("|")
        if not line.strip() or starts_item or line.startswith("#"):
            if current:
                found.append("\n".join(current))
            current = []
        if line.strip():
            current.append(line)
    if current:
        found.append("\n".join(current))
    return found


def unrecorded(block: str, recorded: dict[str, str]) -> list[str]:
    """What is wrong with one block that links bench sections: bad links, unrecorded figures.

    A figure is cited by the first link to bench/README.md after it (the last one before it if
    none follows), so a block quoting two runs names each after its figures.
    """
    links = [(match.start(), match.group(1)) for match in BENCH_LINK.finditer(block)]
    problems = [
        f"links #{key}, not a section of recorded results"
        for _, key in links
        if key not in recorded
    ]
    for match in FIGURE.finditer(block):
        after = [key for at, key in links if at > match.start()]
        key = after[0] if after else links[-1][1]
        if key in recorded and not records(recorded[key], number_of(match.group(0))):
            problems.append(f"{match.group(0)!r} is not in bench/README.md#{key}")
    return problems


def performance_items() -> list[str]:
    level, body = sections(read(README))["performance"]
    assert level == 2, "README.md: the performance summary is its '## Performance' section"
    return [block for block in blocks(body) if re.match(r"\s*[*-] ", block)]


# -- the extraction itself ----------------------------------------------------------------------


def test_figures_are_found_as_written():
    text = (
        "p99 0.104 s after it, 1,799 s as shipped, 0.48 ms, "
        "1.22 \N{MULTIPLICATION SIGN} that drain, 1.61 x drain, "
        "111%, 92 MiB, 4,600 runs/s, 1 query; not 10,000 jobs, p99 alone, v3.10 or 2-core"
    )
    assert figures(text) == [
        "0.104 s",
        "1,799 s",
        "0.48 ms",
        "1.22 \N{MULTIPLICATION SIGN}",
        "1.61 x",
        "111%",
        "92 MiB",
        "4,600 runs/s",
        "1 query",
    ]
    assert records("ours 0.104 s, 12.2 s", "0.104")
    assert not records("ours 0.104 s, 12.2 s", "0.10")
    assert not records("ours 0.104 s, 12.2 s", "2.2")
    assert anchor("Results of 2026-11-25: record ahead, publish on the instant (issue 18.1)") == (
        "results-of-2026-11-25-record-ahead-publish-on-the-instant-issue-181"
    )


def test_a_figure_bench_does_not_record_fails():
    """The check bites: a failover time changed to one the linked run does not record."""
    recorded = recorded_sections()
    item = next(i for i in performance_items() if "SIGKILL" in i)
    assert not unrecorded(item, recorded)
    changed = re.sub(r"replaced in [\d.]+ s", "replaced in 10.4 s", item)
    assert changed != item
    cited = "bench/README.md#results-of-2026-11-27-failover-after-the-session-witness"
    assert unrecorded(changed, recorded) == [f"'10.4 s' is not in {cited}"]
    # 7.5 s is recorded, by an older run than the one the item cites: also refused.
    older = re.sub(r"replaced in [\d.]+ s", "replaced in 7.5 s", item)
    assert unrecorded(older, recorded) == [f"'7.5 s' is not in {cited}"]


# -- measured figures ---------------------------------------------------------------------------


def test_every_figure_of_the_readme_performance_summary_is_recorded_in_bench():
    recorded = recorded_sections()
    items = performance_items()
    assert len(items) >= 5, "README.md's '## Performance' section lost its list of results"
    problems = []
    quoted = 0
    for item in items:
        first_line = item.strip().splitlines()[0]
        if not BENCH_LINK.search(item):
            problems.append(f"{first_line!r}: links no section of bench/README.md")
        if not figures(item):
            problems.append(f"{first_line!r}: quotes no figure")
        quoted += len(figures(item))
        problems += [f"{first_line!r}: {problem}" for problem in unrecorded(item, recorded)]
    assert not problems, "README.md, ## Performance:\n" + "\n".join(problems)
    assert quoted >= 20


def test_the_readme_performance_summary_quotes_figures_only_in_its_items():
    _, body = sections(read(README))["performance"]
    items = set(performance_items())
    loose = [f for block in blocks(body) if block not in items for f in figures(block)]
    assert not loose, f"README.md, ## Performance: figures outside the linked items: {loose}"


@pytest.mark.parametrize("path", PAGES, ids=name)
def test_figures_next_to_a_link_to_bench_are_recorded_there(path):
    recorded = recorded_sections()
    problems = []
    for block in blocks(read(path)):
        if BENCH_LINK.search(block):
            first_line = block.strip().splitlines()[0][:70]
            problems += [f"{first_line!r}: {problem}" for problem in unrecorded(block, recorded)]
    assert not problems, f"{name(path)}:\n" + "\n".join(problems)


def test_the_failover_figures_are_the_most_recent_recorded():
    """The README quotes the newest dated failover run of bench/README.md, not an older one."""
    dated = [
        (key, body)
        for key, body in recorded_sections().items()
        if re.match(r"results-of-\d{4}-\d{2}-\d{2}", key) and "failover.py" in body
    ]
    assert dated, "bench/README.md records no dated failover run"
    newest_key, newest = max(dated, key=lambda pair: pair[0][len("results-of-") :][:10])
    line = next(line for line in newest.splitlines() if "failover.py" in line)
    kill = re.search(r"SIGKILL median[^:]*: ([\d.]+) / ([\d.]+) s \(TTL 10 s\)", line)
    assert kill, f"bench/README.md#{newest_key}: the failover line changed shape: {line}"
    item = next(i for i in performance_items() if "SIGKILL" in i)
    assert f"#{newest_key})" in item
    assert f"{kill.group(1)} s" in item
    assert f"{kill.group(2)} s" in item


# -- defaults -----------------------------------------------------------------------------------


def default(setting: str) -> str:
    value = DEFAULTS[setting].default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def shown(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


LEASE_TTL = default("LEASE_TTL")
POLL = default("POLL_INTERVAL")
# What pages say of defaults in their own words: (page, the exact words with the code's values).
STATED_DEFAULTS = [
    ("README.md", f"with the default {LEASE_TTL} s lease"),
    ("README.md", f"lease TTL 3 s instead of {LEASE_TTL} s"),
    ("docs/quickstart.md", f"within the lease TTL ({LEASE_TTL} s by default)"),
    ("docs/explanation/comparison.md", f"| lease TTL, {LEASE_TTL} s |"),
    ("docs/explanation/guarantees.md", f"(defaults: {LEASE_TTL} s + {POLL} s)"),
    (
        "docs/explanation/how-it-works.md",
        f"With the defaults (TTL {LEASE_TTL} s, poll {POLL} s) a standby takes over within about "
        f"{shown(float(LEASE_TTL) + float(POLL))} s",
    ),
    (
        "docs/explanation/worker.md",
        f"(heartbeat {default('RUN_HEARTBEAT_INTERVAL')} s, "
        f"lost after {default('RUN_LOST_AFTER')} s)",
    ),
    (
        "docs/explanation/worker.md",
        f"| `ttl` | {shown(inspect.signature(ClusterLock).parameters['ttl'].default)} s |",
    ),
    (
        "docs/reference/metrics.md",
        f"`METRICS_JOB_LABEL_LIMIT` ({default('METRICS_JOB_LABEL_LIMIT')};",
    ),
]


@pytest.mark.parametrize(("page", "words"), STATED_DEFAULTS)
def test_defaults_stated_in_prose_are_the_codes(page, words):
    text = re.sub(r"\s+", " ", read(ROOT / page))
    assert words in text, f"{page} should say {words!r} (the code's default; has either changed?)"


# "`LEASE_TTL` (10 s)", "`CLOCK_SKEW_WARNING` (default 1 s)", "`LOOKAHEAD` (60 s by default)"
NAMED_DEFAULT = re.compile(
    r"`([A-Z][A-Z_]+)`\s+\((?:default )?(\d+(?:\.\d+)?)(?: s)?(?: by default)?\)"
)


def test_a_setting_named_with_its_default_says_the_codes():
    problems = []
    seen = 0
    for path in PAGES:
        for setting, value in NAMED_DEFAULT.findall(read(path)):
            if setting not in DEFAULTS:
                problems.append(f"{name(path)}: `{setting}` is not a setting")
                continue
            seen += 1
            if float(value) != float(DEFAULTS[setting].default):
                problems.append(
                    f"{name(path)}: `{setting}` ({value}), the code's default is {default(setting)}"
                )
    assert not problems, "\n".join(problems)
    assert seen >= 4, (
        "found few settings named with a default: has the way they are written changed?"
    )
