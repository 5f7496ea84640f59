"""Shared set-up for the benchmarks: a throwaway Redis, a database, Django configured.

``DATABASE_URL`` selects the database (default: a fresh SQLite file in a temp dir; for
PostgreSQL give a database the benchmark may fill and empty, e.g.
``postgres://postgres@127.0.0.1:5432/test``). Redis is always a throwaway server on a free
port, never a shared one. Django runs with the test suite's settings (its Celery app and tasks).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _devredis() -> ModuleType:
    spec = importlib.util.spec_from_file_location("devredis", ROOT / "scripts" / "devredis.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["devredis"] = module
    spec.loader.exec_module(module)
    return module


def boot(empty: bool = True) -> dict[str, str]:
    """Start Redis, point Django at it and at the database, migrate, and (unless not
    ``empty``) empty the project's tables; return the child env."""
    server = _devredis().RedisServer().start()
    atexit.register(server.stop)
    os.environ["REDIS_URL"] = server.url
    if not os.environ.get("DATABASE_URL"):
        path = Path(tempfile.mkdtemp(prefix="dcc-bench-")) / "bench.sqlite3"
        os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django_cluster_cron.models import (
        JobDefinition,
        JobPiece,
        JobRun,
        RunSummary,
        SchedulerLease,
    )

    if not empty:
        return dict(os.environ)
    # Without loading the rows (a last run may have left millions): what hangs off a job first.
    for model in (JobPiece, JobRun, RunSummary):
        model.objects.all()._raw_delete(model.objects.db)
    JobDefinition.all_objects.all().delete()
    SchedulerLease.objects.all().delete()
    return dict(os.environ)
