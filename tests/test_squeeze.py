"""``python -m emailmw.testing.squeeze``: a command run beside busy processes, its exit
status passed on, the busy processes gone when it ends."""

from __future__ import annotations

import subprocess
import sys

import psutil

# the command: the busy processes beside it (its parent's other children), then exit 3
_BESIDE = (
    "import os, sys, psutil; me = psutil.Process().parent(); "
    "print(' '.join(str(c.pid) for c in me.children() if c.pid != os.getpid())); sys.exit(3)"
)


def test_the_command_runs_beside_busy_processes_and_its_status_is_passed_on() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "emailmw.testing.squeeze", "--hogs", "2", "--",
         sys.executable, "-c", _BESIDE],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 3
    busy = [int(pid) for pid in done.stdout.split()]
    assert len(busy) == 2
    assert "[squeeze] 2 busy process(es) beside:" in done.stderr
    assert not [pid for pid in busy if psutil.pid_exists(pid)]  # ended with the command


def test_a_missing_command_is_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "emailmw.testing.squeeze", "--hogs", "1"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "name the command to run after --" in done.stderr
    assert "Traceback" not in done.stderr
