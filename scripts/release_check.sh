#!/usr/bin/env bash
# Release check: build the sdist and wheel, check their metadata and contents, then install ONLY
# the wheel with its redis extra (and their declared dependencies) into a fresh virtualenv, make a new Django project
# that uses the app, and drive one real slot through it: run_scheduler --once publishes to a
# throwaway Redis, a Celery worker runs it, the run ends `success`.
#
# Everything lives in a temp dir; every process started here is stopped on exit.
# Prints PASS/FAIL lines; exits non-zero on the first failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
START=$SECONDS
TMP="$(mktemp -d "${TMPDIR:-/tmp}/release-check.XXXXXX")"
REDIS_PID=""
WORKER_PID=""

cleanup() {
    local rc=$?
    for pid in "$WORKER_PID" "$REDIS_PID"; do
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$TMP"
    if [ "$rc" -eq 0 ]; then
        echo "release-check: ALL PASSED in $((SECONDS - START))s"
    else
        echo "release-check: FAILED (exit $rc) after $((SECONDS - START))s" >&2
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pass() { echo "PASS: $*"; }
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
step() { echo "---- $*"; }

# -- 1. build ------------------------------------------------------------------------------
step "build"
"$PY" -c "import build, twine" 2>/dev/null ||
    "$PY" -m pip install --quiet --disable-pip-version-check build twine >"$TMP/pip-tools.log" 2>&1 ||
    { tail -20 "$TMP/pip-tools.log" >&2; fail "could not install build and twine into $("$PY" -c 'import sys; print(sys.prefix)')"; }
# Build the sdist, then the wheel FROM the sdist (python -m build's default): a file missing
# from the sdist shows up as a broken wheel here, not on a user's machine.
"$PY" -m build --outdir "$TMP/dist" "$ROOT" >"$TMP/build.log" 2>&1 ||
    { tail -30 "$TMP/build.log" >&2; fail "python -m build"; }
WHEEL="$(ls "$TMP"/dist/*.whl)"
SDIST="$(ls "$TMP"/dist/*.tar.gz)"
pass "built $(basename "$SDIST") and $(basename "$WHEEL")"

"$PY" -m twine check --strict "$TMP"/dist/* >"$TMP/twine.log" 2>&1 ||
    { cat "$TMP/twine.log" >&2; fail "twine check --strict"; }
pass "twine check --strict"

# -- 2. contents ---------------------------------------------------------------------------
step "contents"
"$PY" - "$WHEEL" "$SDIST" <<'EOF' || fail "distribution contents (see above)"
import sys, tarfile, zipfile

wheel, sdist = sys.argv[1], sys.argv[2]
problems = []
w = zipfile.ZipFile(wheel).namelist()
s = [n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n]

def need(names, what, where):
    if not any(what(n) for n in names):
        problems.append(f"{where}: missing {what.__doc__}")

def has(prefix, suffix=""):
    def test(name):
        return name.startswith(prefix) and name.endswith(suffix)
    test.__doc__ = prefix + ("*" + suffix if suffix else "")
    return test

for names, where in ((w, "wheel"), (s, "sdist")):
    need(names, has("django_cluster_cron/py.typed"), where)
    need(names, has("django_cluster_cron/migrations/0001_initial.py"), where)
    need(names, has("django_cluster_cron/templates/admin/", ".html"), where)
    need(names, has("django_cluster_cron/static/django_cluster_cron/", ".js"), where)
    need(names, has("django_cluster_cron/static/django_cluster_cron/", ".css"), where)
    need(names, has("django_cluster_cron/templatetags/cluster_cron.py"), where)
    need(names, has("django_cluster_cron/management/commands/run_scheduler.py"), where)
    for bad in ("__pycache__", ".pyc"):
        if any(bad in n for n in names):
            problems.append(f"{where}: contains {bad}")
need(w, has("django_cluster_cron-", "/licenses/LICENSE"), "wheel")
for name in w:
    top = name.split("/", 1)[0]
    if top != "django_cluster_cron" and not top.endswith(".dist-info"):
        problems.append(f"wheel: unexpected top-level entry {name}")
for name in ("README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml", "PKG-INFO"):
    if name not in s:
        problems.append(f"sdist: missing {name}")
need(s, has("tests/conftest.py"), "sdist")
need(s, has("scripts/devredis.py"), "sdist")  # the suite's conftest starts Redis with it
allowed = ("django_cluster_cron/", "tests/", "docs/", "scripts/devredis.py")
for name in s:
    if "/" in name and not name.startswith(allowed):
        problems.append(f"sdist: unexpected {name}")
for p in problems:
    print("  ", p, file=sys.stderr)
print(f"   wheel: {len(w)} files; sdist: {len(s)} files")
sys.exit(1 if problems else 0)
EOF
pass "wheel and sdist contents (py.typed, migrations, templates, static files, license; no tests or caches in the wheel)"

# -- 3. throwaway Redis --------------------------------------------------------------------
step "throwaway Redis"
"$PY" "$ROOT/scripts/devredis.py" serve >"$TMP/redis.url" 2>"$TMP/redis.log" &
REDIS_PID=$!
for _ in $(seq 100); do
    grep -q '^redis://' "$TMP/redis.url" 2>/dev/null && break
    kill -0 "$REDIS_PID" 2>/dev/null || break
    sleep 0.1
done
REDIS_URL="$(grep -m1 '^redis://' "$TMP/redis.url" || true)"
[ -n "$REDIS_URL" ] || { cat "$TMP/redis.log" >&2; fail "throwaway Redis did not start"; }
case "$REDIS_URL" in *:6379/*) fail "refusing to use the shared Redis on port 6379" ;; esac
REDIS_BASE="${REDIS_URL%/*}"
pass "Redis at $REDIS_BASE (cache db 0, broker db 1)"

# -- 4. fresh venv with only the wheel -----------------------------------------------------
step "fresh virtualenv"
BASE_PY="$("$PY" -c 'import sys; print(sys._base_executable)')"
"$BASE_PY" -m venv "$TMP/venv" || fail "python -m venv"
V="$TMP/venv/bin"
# The quickstart's install: the wheel and its redis extra (the Redis lease and broker).
"$V/python" -m pip install --quiet --disable-pip-version-check "$WHEEL[redis]" >"$TMP/pip.log" 2>&1 ||
    { tail -20 "$TMP/pip.log" >&2; fail "pip install of the wheel"; }
pass "installed the wheel with its redis extra ($("$V/python" -c 'import django_cluster_cron as m; print(m.__version__)'), Django $("$V/python" -c 'import django; print(django.get_version())'), $("$V/python" -V))"
"$V/python" -c "import kombu.transport.redis, redis; from kombu import Connection; \
c = Connection('$REDIS_BASE/1'); c.ensure_connection(max_retries=1); c.release()" ||
    fail "kombu's Redis transport does not work with the declared dependencies"
pass "kombu's Redis transport connects with the declared dependencies only"

# -- 5. a new project ----------------------------------------------------------------------
step "new Django project"
mkdir "$TMP/proj"
cd "$TMP/proj"
"$V/django-admin" startproject smoke . || fail "django-admin startproject"
"$V/python" manage.py startapp smokeapp || fail "manage.py startapp"
cat >smokeapp/tasks.py <<'EOF'
from celery import shared_task


@shared_task(name="smokeapp.ping")
def ping(word: str = "pong") -> str:
    return word
EOF
cat >smoke/celery.py <<'EOF'
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smoke.settings")

app = Celery("smoke")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
EOF
cat >smoke/__init__.py <<'EOF'
from .celery import app as celery_app

__all__ = ("celery_app",)
EOF
cat >>smoke/settings.py <<EOF

INSTALLED_APPS += ["django_cluster_cron", "smokeapp"]
USE_TZ = True
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "$REDIS_BASE/0",
    },
}
CELERY_BROKER_URL = "$REDIS_BASE/1"
CLUSTER_CRON = {"CELERY_APP": "smoke.celery:app"}
EOF
M="$V/python manage.py"
# `shell -c` with Django 5.2+ announces its auto-imports; the answer is the last line.
shell_out() { $M shell -c "$1" 2>/dev/null | tail -n 1; }
$M migrate --verbosity 0 || fail "migrate"
pass "migrate"
$M check --fail-level WARNING || fail "manage.py check"
pass "manage.py check"
$M makemigrations --check --dry-run django_cluster_cron >/dev/null ||
    fail "makemigrations --check: the app's models and migrations disagree"
pass "makemigrations --check --dry-run"

# -- 6. one slot, end to end ---------------------------------------------------------------
step "one slot end to end"
# Every second (seconds field last, docs/how-to/time-zones.md); `latest` so the seconds that pass before
# the tick give one run, not one per second.
$M shell -v 0 -c "
from django_cluster_cron.models import JobDefinition
job = JobDefinition(name='smoke', cron='* * * * * *', timezone='UTC', task='smokeapp.ping',
                    args=['pong'], catchup_policy='latest')
job.full_clean()
job.save()
" || fail "create a JobDefinition"
sleep 1.5
$M run_scheduler --once --node-id release-check >"$TMP/sched.log" 2>&1 ||
    { cat "$TMP/sched.log" >&2; fail "run_scheduler --once exited non-zero"; }
TASK_ID="$(shell_out "
from django_cluster_cron.models import JobRun
runs = list(JobRun.objects.exclude(status='missed'))
assert len(runs) == 1, [(r.status, r.task_id) for r in runs]
run = runs[0]
assert run.status == 'queued', run.status
assert run.task_id.startswith('cron-'), run.task_id
print(run.task_id)
")" || { cat "$TMP/sched.log" >&2; fail "exactly one queued run with a cron- task id"; }
pass "run_scheduler --once: one run, queued, task id $TASK_ID"

"$V/python" - "$REDIS_BASE/1" "$TASK_ID" <<'EOF' || fail "the broker holds no message for $TASK_ID"
import json, sys

import redis

url, task_id = sys.argv[1:]
client = redis.Redis.from_url(url)
ids = []
for raw in client.lrange("celery", 0, -1):
    message = json.loads(raw)
    headers = message.get("headers", {})
    ids.append(headers.get("id"))
    if headers.get("id") == task_id:
        assert headers.get("task") == "django_cluster_cron.execute_run", headers.get("task")
        sys.exit(0)
print(f"   queue 'celery' holds {ids}", file=sys.stderr)
sys.exit(1)
EOF
pass "broker queue 'celery' holds the message $TASK_ID (task django_cluster_cron.execute_run)"

"$V/celery" -A smoke worker --pool solo --concurrency 1 --loglevel INFO --without-gossip \
    --without-mingle --without-heartbeat >"$TMP/worker.log" 2>&1 &
WORKER_PID=$!
STATUS=""
for _ in $(seq 60); do
    STATUS="$(shell_out "
from django_cluster_cron.models import JobRun
print(JobRun.objects.get(task_id='$TASK_ID').status)
" || true)"
    [ "$STATUS" = "success" ] && break
    kill -0 "$WORKER_PID" 2>/dev/null || break
    sleep 1
done
kill -TERM "$WORKER_PID" 2>/dev/null || true
wait "$WORKER_PID" 2>/dev/null || true
WORKER_PID=""
[ "$STATUS" = "success" ] || { tail -30 "$TMP/worker.log" >&2; fail "run ended '$STATUS', not success"; }
pass "celery worker ran $TASK_ID: success"
