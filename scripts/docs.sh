#!/usr/bin/env bash
# Build the documentation site into site/ with MkDocs in strict mode: any warning (a broken
# link or anchor, a page missing from the nav) fails the build. `make docs` and CI call this.
# Writers: `.venv/bin/mkdocs serve` previews at http://127.0.0.1:8000/ and reloads on save.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/bootstrap.sh
# Material prints an end-of-life notice on every build; it is not about our docs.
export NO_MKDOCS_2_WARNING=1
exec .venv/bin/mkdocs build --strict --site-dir site "$@"
