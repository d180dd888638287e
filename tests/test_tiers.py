"""The test tiers: a test that needs the real mail server is marked so, and skips with the
reason where the server cannot run, except where every test must run (CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# a server test, collected and run as if this process were not root
_NOT_ROOT = (
    "import os, sys, pytest; os.geteuid = lambda: 1000; sys.exit(pytest.main(["
    "'-q', '-rs', '-p', 'no:cacheprovider', 'tests/email/test_cli.py::test_topic_pub']))"
)


def _run(require: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EMAILMW_REQUIRE_MAILSERVER"}
    if require:
        env["EMAILMW_REQUIRE_MAILSERVER"] = "1"
    return subprocess.run(
        [sys.executable, "-c", _NOT_ROOT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_server_test_skips_with_its_reason_where_the_server_cannot_run() -> None:
    result = _run(require=False)
    assert result.returncode == 0, result.stdout[-2000:]
    assert "1 skipped" in result.stdout
    assert "must be started as root" in result.stdout


def test_where_every_test_must_run_it_fails_instead() -> None:
    result = _run(require=True)
    assert result.returncode == 1, result.stdout[-2000:]
    assert "EMAILMW_REQUIRE_MAILSERVER is set" in result.stdout


def test_server_tests_carry_the_mailserver_marker(request: pytest.FixtureRequest) -> None:
    """Collected the way pytest collects them: every test of tests/email uses the server
    and is marked; this file's tests are not."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
         "-m", "not mailserver", "tests/email"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    # the only tests of tests/email that need no server
    assert {line.split("::")[1].split("[")[0] for line in collected} == {
        "test_a_verb_without_a_mail_account_says_how_to_configure_one",
        "test_version",
        "test_interface_show_and_list_and_errors",
        "test_the_rule_is_mechanical",
        "test_yaml_mistakes_say_where_in_one_line",
        "test_completion_never_waits_more_than_its_budget",
        "test_a_killed_peer_s_lines_are_read_to_the_end",
        "test_a_repeat_is_one_unflagged_copy_whichever_member_printed_it_first",
    }
    assert request.node.get_closest_marker("mailserver") is None
