"""The email examples, run in pairs as separate processes against the real server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from emailmw.testing.mailserver import MailServer

from .helpers import write_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run_pair(
    waiter: str, driver: str, waiter_config: Path, driver_config: Path, count: int
) -> tuple[str, str]:
    def start(script: str, config: Path) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                str(EXAMPLES / script),
                "--config",
                str(config),
                "--count",
                str(count),
                "--timeout",
                "30",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=EXAMPLES,
        )

    first = start(waiter, waiter_config)
    assert first.stdout is not None
    assert first.stdout.readline().strip() == "ready", first.stderr.read() if first.stderr else ""
    second = start(driver, driver_config)
    out2, err2 = second.communicate(timeout=120)
    out1, err1 = first.communicate(timeout=120)
    assert second.returncode == 0, err2
    assert first.returncode == 0, err1
    return out1, out2


@pytest.mark.parametrize(
    "subscriber", ["sub.py", "sub_wait.py", "sub_wait_message_info.py", "sub_wait_set.py"]
)
def test_pub_and_sub_examples(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path, subscriber: str
) -> None:
    talker, listener = account(), account()
    out, _ = _run_pair(
        subscriber,
        "pub.py",
        write_config(tmp_path / "l.yml", mailserver.config(listener)),
        write_config(tmp_path / "t.yml", mailserver.config(talker, to=listener)),
        count=3,
    )
    assert out.count("Hello, world!") == 3


@pytest.mark.parametrize(
    ("server", "client"),
    [
        ("service_server.py", "service_client.py"),
        ("service_server_wait.py", "service_client_wait.py"),
        ("service_server_wait_service_info.py", "service_client_wait_service_info.py"),
    ],
)
def test_service_examples(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path, server: str, client: str
) -> None:
    server_address, client_address = account(), account()
    _, out = _run_pair(
        server,
        client,
        write_config(tmp_path / "s.yml", mailserver.config(server_address)),
        write_config(tmp_path / "c.yml", mailserver.config(client_address, to=server_address)),
        count=2,
    )
    assert "0 + 1 = 1" in out
    assert "1 + 2 = 3" in out


def test_send_and_receive_examples(
    mailserver: MailServer, account: Callable[[], str], tmp_path: Path
) -> None:
    config = write_config(tmp_path / "a.yml", mailserver.config(account()))
    out, _ = _run_pair("receive.py", "send.py", config, config, count=1)
    assert "hello from emailmw (0)" in out


def test_demo_runs_over_the_local_server(mailserver: MailServer, tmp_path: Path) -> None:
    del mailserver  # the demo starts its own; this one says whether a server can run here
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "demo.py"), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert out.count("listener | I heard: 'Hello World:") == 10
    assert "Result of add_two_ints: 2 + 3 = 5" in out
    assert "cli | data: 'Hello World:" in out  # emailmw topic echo against the running demo
    assert "cli | sum: 42" in out  # emailmw service call
    assert "cli | /listener" in out  # emailmw node list
    assert "report | service calls: 4 (4 answered" in out  # the 3 client calls and the CLI's
    assert "intraprocess" not in out
