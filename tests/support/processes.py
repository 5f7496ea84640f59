"""For the pure core's tests: what a snippet prints in fresh interpreters with different
``PYTHONHASHSEED`` values (every scheduler host must compute the same thing)."""

from __future__ import annotations

import subprocess
import sys


def printed_in_processes(code: str, seeds: tuple[str, ...] = ("0", "1", "12345")) -> set[str]:
    """The distinct outputs of ``code`` run by ``python -c`` once per hash seed."""
    return {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in seeds
    }
