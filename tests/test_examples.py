"""The intraprocess examples run and exit 0, as the README promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize(
    "script",
    [
        "intraprocess_pub_sub.py",
        "intraprocess_service.py",
        "wait_set.py",
        "stem_status_cell.py",
        "ymp_host.py",
        "floctrl_chat.py",
    ],
)
def test_intraprocess_example_runs(script: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


@pytest.mark.spark
def test_demo_falls_back_to_intraprocess_and_still_reports(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "demo.py"), "--intraprocess", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "running on the intraprocess transport" in result.stdout
    assert "10 messages, 3 requests, 3 responses" in result.stdout
    assert (tmp_path / "report" / "report.html").exists()


def test_the_face_examples_say_what_their_seeds_promise() -> None:
    def run(script: str) -> str:
        return subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True,
                              text=True, timeout=60, check=True).stdout  # fmt: skip

    assert "lab:status is fine (asked by desk:asker)" in run("stem_status_cell.py")
    assert "{'status': 'ok', 'stored': 'example text'}" in run("ymp_host.py")
    chat = run("floctrl_chat.py").splitlines()
    assert len(chat) == 5  # everyone once, the sender too
    assert "/blue/cy   got 'hello, everyone' (address /blue/*)" in chat
