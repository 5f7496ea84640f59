#!/usr/bin/env bash
# Create .venv (if missing) and install the project with its test, lint, example and docs extras
# (and the mysql extra when DATABASE_URL names a MySQL/MariaDB server).
# Idempotent and quiet: re-runs are instant unless pyproject.toml changed. Errors stay visible.
# Env: PYTHON (default python3) picks the interpreter for a new venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv
STAMP="$VENV/.bootstrap-stamp"

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "bootstrap: '$PYTHON' not found; install Python 3.10 or newer" >&2
    exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
        echo "bootstrap: Python 3.10 or newer is required ($("$PYTHON" --version 2>&1))" >&2
        exit 1
    fi
    echo "bootstrap: creating $VENV with $("$PYTHON" --version 2>&1)"
    if ! "$PYTHON" -m venv "$VENV"; then
        rm -rf "$VENV"
        echo "bootstrap: '$PYTHON -m venv' failed. On Debian/Ubuntu install the venv module:" >&2
        echo "    apt-get install python3-venv" >&2
        exit 1
    fi
fi

# Reinstall only when what we install from changed (or a previous install did not finish).
# Tool sections (pytest, ruff, mypy, coverage) do not change what gets installed.
install_inputs() {
    awk '/^\[/ { skip = ($0 ~ /^\[+tool\.(pytest|ruff|mypy|coverage|django-stubs)/) } !skip' \
        pyproject.toml
    cat scripts/bootstrap.sh
}
EXTRAS="test,from-celery-beat,lint,example,docs"
case "${DATABASE_URL:-}" in
    mysql*) EXTRAS="$EXTRAS,mysql" ;;
esac
want="$(install_inputs | cksum) $("$VENV/bin/python" -V 2>&1) $EXTRAS"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
    exit 0
fi

echo "bootstrap: installing the project and its extras ($EXTRAS) into $VENV"
rm -f "$STAMP"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"$VENV/bin/python" -m pip install --quiet --upgrade pip
if ! "$VENV/bin/python" -m pip install --quiet -e ".[$EXTRAS]"; then
    case "$EXTRAS" in
        *mysql*)
            echo "bootstrap: installing mysqlclient failed. It compiles against the MySQL/MariaDB" >&2
            echo "client library; on Debian/Ubuntu: apt-get install libmariadb-dev pkg-config" >&2
            ;;
    esac
    exit 1
fi
printf '%s' "$want" >"$STAMP"
