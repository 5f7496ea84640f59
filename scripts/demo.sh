#!/usr/bin/env bash
# `make demo`: the example project and everything it needs, on this machine.
#
# Starts a Redis (unless one is given or already answers on 127.0.0.1:6379), a Celery worker,
# the Django dev server and, once the app ships `manage.py run_scheduler`, two schedulers that
# compete for the leader lease. Ctrl-C stops everything this script started, and nothing else.
#
# Environment:
#   REDIS_URL            use this Redis (leader lease, cache, default broker)
#   DATABASE_URL         use this database instead of example_project/db.sqlite3
#   CELERY_BROKER_URL    a broker other than that Redis, e.g. amqp://guest:guest@127.0.0.1:5672//
#   DEMO_OWN_REDIS=1     start a throwaway Redis even if 127.0.0.1:6379 answers
#   DEMO_REDIS_PORT      port for the throwaway Redis (default 6390; a free one if that is taken)
#   DEMO_PORT            dev server port (default 8000)
#   DEMO_USER / DEMO_PASSWORD   the demo superuser (default admin / admin)
#   DEMO_SKIP_BOOTSTRAP=1       use .venv as it is instead of running scripts/bootstrap.sh

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PY="$ROOT/.venv/bin/python"
CELERY="$ROOT/.venv/bin/celery"
DEMO_PORT="${DEMO_PORT:-8000}"
DEMO_USER="${DEMO_USER:-admin}"
DEMO_PASSWORD="${DEMO_PASSWORD:-admin}"
STOP_TIMEOUT=15 # seconds a process gets to stop on SIGTERM before SIGKILL

PIDS=()  # what we started, each the leader of its own process group, in start order
NAMES=()
ESSENTIAL=() # 1: the demo stops if it exits; 0: a scheduler, which the demo invites you to kill

log() { printf '[demo] %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}
# Hide passwords in URLs before printing them.
redact() { printf '%s' "$1" | sed -E 's#//([^:/@]*):[^@/]*@#//\1:***@#'; }

# start [--optional] NAME COMMAND...: run COMMAND in the background in a process group of its
# own, so that stopping it also reaches its children (Celery's pool, runserver's reloader,
# redis-server).
start() {
    local essential=1
    if [ "$1" = "--optional" ]; then
        essential=0
        shift
    fi
    local name=$1
    shift
    set -m
    "$@" </dev/null &
    local pid=$!
    set +m
    PIDS+=("$pid")
    NAMES+=("$name")
    ESSENTIAL+=("$essential")
    log "started $name (pid $pid)"
}

# stop PID NAME: SIGTERM the leader only (a Celery worker then finishes its running tasks; a
# SIGTERM to its pool children would kill them mid-task), wait, then clear the group.
stop() {
    local pid=$1 name=$2 waited=0
    kill -TERM "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((STOP_TIMEOUT * 10)) ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name did not stop within ${STOP_TIMEOUT}s; killing it"
    fi
    kill -TERM -- "-$pid" 2>/dev/null || true
    sleep 0.2
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    local i
    if [ "${#PIDS[@]}" -gt 0 ]; then
        log "stopping..."
        # Reverse order: schedulers and servers first, Redis last, so they shut down cleanly.
        for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
            stop "${PIDS[$i]}" "${NAMES[$i]}"
        done
        log "stopped everything the demo started"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

redis_answers() { # redis_answers URL: does a Redis at URL answer PING?
    "$PY" - "$1" <<'EOF' >/dev/null 2>&1
import sys

import redis

redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1, socket_timeout=1).ping()
EOF
}

port_taken() { # port_taken PORT: does anything accept connections on 127.0.0.1:PORT?
    "$PY" - "$1" <<'EOF' >/dev/null 2>&1
import socket
import sys

socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
EOF
}

wait_for_redis() { # wait_for_redis URL PID: until it answers, or the process died
    local tries=0
    until redis_answers "$1"; do
        kill -0 "$2" 2>/dev/null || die "the throwaway Redis exited; see the messages above"
        tries=$((tries + 1))
        [ "$tries" -lt 100 ] || die "the throwaway Redis at $1 did not answer within 20s"
        sleep 0.2
    done
}

# --- 1. virtualenv -----------------------------------------------------------------------------

if [ "${DEMO_SKIP_BOOTSTRAP:-0}" = "1" ]; then
    log "DEMO_SKIP_BOOTSTRAP=1: using .venv as it is"
elif [ -f scripts/bootstrap.sh ]; then
    log "bootstrapping .venv (scripts/bootstrap.sh)"
    bash scripts/bootstrap.sh
else
    log "scripts/bootstrap.sh not found; using .venv as it is"
fi
[ -x "$PY" ] || die "$PY not found; run scripts/bootstrap.sh first"

# --- 2. Redis ----------------------------------------------------------------------------------

if [ -n "${REDIS_URL:-}" ]; then
    redis_answers "$REDIS_URL" || die "REDIS_URL=$(redact "$REDIS_URL") does not answer PING"
    log "using Redis from REDIS_URL: $(redact "$REDIS_URL")"
elif [ "${DEMO_OWN_REDIS:-0}" != "1" ] && redis_answers "redis://127.0.0.1:6379/0"; then
    REDIS_URL="redis://127.0.0.1:6379/0"
    log "using the Redis that answers on 127.0.0.1:6379 (set DEMO_OWN_REDIS=1 to use a throwaway one)"
else
    redis_port="${DEMO_REDIS_PORT:-6390}"
    if port_taken "$redis_port"; then
        redis_port="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
        log "port ${DEMO_REDIS_PORT:-6390} is taken; the throwaway Redis uses port $redis_port"
    fi
    REDIS_URL="redis://127.0.0.1:$redis_port/0"
    if [ -f scripts/devredis.py ]; then
        # Stops its redis-server on SIGTERM (and, on Linux, if it dies itself).
        start redis "$PY" scripts/devredis.py serve --port "$redis_port" >/dev/null
    else
        command -v redis-server >/dev/null || die "no Redis: set REDIS_URL or install redis-server"
        start redis redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
            >/dev/null
    fi
    wait_for_redis "$REDIS_URL" "${PIDS[0]}"
    log "started a throwaway Redis at $REDIS_URL (gone when the demo stops)"
fi
export REDIS_URL
export DEMO_PING_URL="http://127.0.0.1:$DEMO_PORT/demo/ping/"

# --- 3. database and demo data -----------------------------------------------------------------

cd "$ROOT/example_project"
manage() { "$PY" manage.py "$@"; }

log "database: $(redact "${DATABASE_URL:-sqlite:///example_project/db.sqlite3}")"
manage migrate --no-input
manage demo_setup --username "$DEMO_USER" --password "$DEMO_PASSWORD"

# --- 4. processes ------------------------------------------------------------------------------

start celery-worker "$CELERY" -A example_project worker -l info --concurrency 2

if manage help run_scheduler >/dev/null 2>&1; then
    HAVE_SCHEDULER=1
    start --optional scheduler-a "$PY" manage.py run_scheduler --node-id demo-a
    start --optional scheduler-b "$PY" manage.py run_scheduler --node-id demo-b
else
    HAVE_SCHEDULER=0
fi

start runserver "$PY" manage.py runserver "127.0.0.1:$DEMO_PORT"

tries=0
until "$PY" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)" \
    "$DEMO_PING_URL" >/dev/null 2>&1; do
    tries=$((tries + 1))
    [ "$tries" -lt 60 ] || die "the dev server did not answer $DEMO_PING_URL within 30s"
    for i in "${!PIDS[@]}"; do
        kill -0 "${PIDS[$i]}" 2>/dev/null || die "${NAMES[$i]} exited during startup"
    done
    sleep 0.5
done

cat >&2 <<EOF

==========================================================================================
 django-cluster-cron demo is running
   Admin:     http://127.0.0.1:$DEMO_PORT/admin/   (user: $DEMO_USER  password: $DEMO_PASSWORD)
   Ping view: $DEMO_PING_URL
   Redis:     $(redact "$REDIS_URL")
   Broker:    $(redact "${CELERY_BROKER_URL:-$REDIS_URL}")
EOF
if [ "$HAVE_SCHEDULER" = "1" ]; then
    cat >&2 <<EOF
   Schedulers demo-a and demo-b compete for the lease: one leads, the other stands by.
   Stop the leader (kill -TERM or kill -9 its pid, listed above) and watch the other
   take over; the demo keeps running.
EOF
else
    cat >&2 <<EOF
   Note: the scheduler (\`manage.py run_scheduler\`) arrives with the next release; until then jobs are defined and previewed in the admin but not dispatched.
EOF
fi
cat >&2 <<EOF
 Press Ctrl-C to stop everything.
==========================================================================================

EOF

# Run until Ctrl-C, or until Redis, the worker or the dev server exits on its own.
while true; do
    for i in "${!PIDS[@]}"; do
        if [ "${ESSENTIAL[$i]}" != "-" ] && ! kill -0 "${PIDS[$i]}" 2>/dev/null; then
            wait "${PIDS[$i]}" && code=0 || code=$?
            if [ "${ESSENTIAL[$i]}" = "1" ]; then
                die "${NAMES[$i]} exited (status $code); stopping the demo"
            fi
            log "${NAMES[$i]} (pid ${PIDS[$i]}) exited (status $code); the demo keeps running"
            ESSENTIAL[i]="-" # reported once
        fi
    done
    sleep 1
done
