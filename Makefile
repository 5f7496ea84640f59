# Developer and CI entry points. Everything runs from .venv, which scripts/bootstrap.sh creates.
.DEFAULT_GOAL := help
SHELL := bash

VENV := .venv
PY := $(VENV)/bin/python
# Any PostgreSQL database the current user can reach; pytest-django creates test_<name>_<pid>.
POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/test
# Any MySQL 8 / MariaDB 10.11+ server and database (mysqlclient needs libmariadb-dev, pkg-config).
MYSQL_URL ?= mysql://root@127.0.0.1:3306/test
DJANGO_ADMIN := DJANGO_SETTINGS_MODULE=tests.settings $(VENV)/bin/django-admin

.PHONY: help bootstrap test test-postgres test-mysql matrix lint format check chaos demo docs bench release-check clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

bootstrap:  ## create .venv and install the project with its extras
	bash scripts/bootstrap.sh

test:  ## run the test suite (SQLite, throwaway Redis; DATABASE_URL/REDIS_URL override)
	bash scripts/test.sh $(PYTEST_ARGS)

test-postgres:  ## run the test suite against PostgreSQL (POSTGRES_URL)
	DATABASE_URL="$(POSTGRES_URL)" bash scripts/test.sh $(PYTEST_ARGS)

test-mysql:  ## run the test suite against MySQL/MariaDB (MYSQL_URL)
	DATABASE_URL="$(MYSQL_URL)" bash scripts/test.sh $(PYTEST_ARGS)

matrix:  ## every Python 3.10-3.13 x Django 5.2/6.0/6.1 pair on SQLite (tox; TOX_ARGS="-e py313-django61")
	bash scripts/matrix.sh $(TOX_ARGS)

lint: bootstrap  ## ruff check, ruff format --check, mypy, the import contracts, the house check
	bash scripts/lint.sh

format: bootstrap  ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

check: bootstrap  ## Django system checks and no missing migrations (app and example project)
	$(DJANGO_ADMIN) check --pythonpath .
	$(DJANGO_ADMIN) makemigrations --check --dry-run --pythonpath .
	$(PY) example_project/manage.py check
	$(PY) example_project/manage.py makemigrations --check --dry-run

chaos:  ## the chaos suite (PostgreSQL or MariaDB): CHAOS_SEED, CHAOS_DURATION, CHAOS_LEASE select the run
	$(PY) -m pytest tests/chaos -m chaos -s -p no:cacheprovider

demo:  ## run the example project end to end
	bash scripts/demo.sh

docs:  ## build the documentation site into site/ (warnings are errors); `mkdocs serve` to write
	bash scripts/docs.sh

bench:  ## the benchmarks vs the targets (bench/README.md) and the peers; BENCH_ARGS=--quick for a smoke run
	bash scripts/bench.sh $(BENCH_ARGS)

release-check:  ## build sdist and wheel, check them, smoke-test the wheel in a fresh project
	bash scripts/release_check.sh

clean:  ## remove caches and build output (keeps .venv)
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis .coverage htmlcov build dist .tmp
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +
