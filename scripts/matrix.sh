#!/usr/bin/env bash
# The Python x Django matrix (tox.ini): finds Python 3.10-3.13 (on PATH, or installed through
# pyenv), then runs tox; arguments go to tox. `make matrix` runs every pair on SQLite.
#   bash scripts/matrix.sh                        # every pair, SQLite
#   bash scripts/matrix.sh -e py313-django61      # one pair
#   DATABASE_URL=postgres://... bash scripts/matrix.sh -e py310-django52,py313-django61
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh >/dev/null

# pyenv installs each version under $(pyenv root)/versions/X.Y.Z; its shims answer only for the
# versions selected, so put each version's bin directory on PATH for tox to find python3.X.
if command -v pyenv >/dev/null 2>&1; then
    root="$(pyenv root)"
    for minor in 3.10 3.11 3.12 3.13; do
        command -v "python$minor" >/dev/null 2>&1 && "python$minor" -V >/dev/null 2>&1 && continue
        found="$(ls -d "$root"/versions/"$minor".*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
        [ -n "$found" ] && PATH="$found:$PATH"
    done
    export PATH
fi
for minor in 3.10 3.11 3.12 3.13; do
    if "python$minor" -V >/dev/null 2>&1; then
        echo "matrix: python$minor is $(command -v "python$minor")"
    else
        echo "matrix: python$minor not found (tox fails for its pairs; pick others with -e)"
    fi
done
exec .venv/bin/tox "$@"
