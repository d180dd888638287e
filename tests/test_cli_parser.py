"""The command line's parser: a command line registers (and imports) only the command it
runs, the others by name and help; that help is each command's own. No server."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from emailmw._cli import COMMANDS, parser


def _helps(top: argparse.ArgumentParser) -> dict[str, str]:
    (commands,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    return {choice.dest: choice.help or "" for choice in commands._choices_actions}


def test_every_command_s_help_is_its_own_in_the_order_help_lists_them() -> None:
    assert _helps(parser()) == COMMANDS
    assert list(_helps(parser())) == list(COMMANDS)
    assert _helps(parser(["topic", "list"])) == COMMANDS


def test_a_command_line_imports_only_the_command_it_runs() -> None:
    probe = (
        "import sys; from emailmw._cli import parser; "
        "top = parser(['--config', 'x.yml', 'topic', 'list']); "
        "top.parse_args(['--config', 'x.yml', 'topic', 'list']); "
        "import json; print(json.dumps(sorted(m.rsplit('.', 1)[1] for m in sys.modules "
        "if m.startswith('emailmw._cli.'))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    loaded = set(json.loads(done.stdout))
    assert "topic" in loaded
    # (topic reads types with interface's helpers: imported by topic itself)
    assert loaded & set(COMMANDS) == {"topic", "interface"}, loaded


def test_no_daemon_goes_after_the_verb_too_as_ros2_takes_it() -> None:
    # (#60: emailmw topic list --no-daemon was a usage error)
    argv = ["topic", "list", "--no-daemon"]
    assert parser(argv).parse_args(argv).no_daemon is True
    assert parser(["--no-daemon", "topic", "list"]).parse_args(["--no-daemon", "topic", "list"])


def test_a_ctrl_c_at_start_up_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # (#60: a Ctrl-C before the command ran, while the daemon was asked, was a traceback)
    import emailmw._cli
    from emailmw.__main__ import run

    def interrupted(argv: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(emailmw._cli, "try_daemon", interrupted)
    monkeypatch.setattr("sys.argv", ["emailmw", "topic", "list"])
    assert run() == 130
    assert capsys.readouterr().err == "emailmw: interrupted\n"
