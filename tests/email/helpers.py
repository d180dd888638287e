"""Run peer processes and read their output with deadlines."""

from __future__ import annotations

import json
import os
import shutil
import signal
import smtplib
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import imapclient
import pytest
import yaml

import emailmw
from emailmw._core.config import load_options
from emailmw._transport.group import imap as group_imap
from emailmw._transport.group.imap import ImapGroupStore
from emailmw._transport.group.model import Holding
from emailmw.testing.mailserver import MailServer

from ..helpers import Recorder, deadline_loop

ROOT = Path(__file__).resolve().parents[2]
TRANSPORTS = ["native", "curl"]


def receive_bodies(sub: emailmw.Subscription, count: int, timeout: float = 60) -> list[str]:
    """Up to ``count`` messages of ``sub`` (their bodies), waiting at most ``timeout``."""
    got: list[str] = []
    more = deadline_loop(timeout)
    while len(got) < count and more():
        found = emailmw.wait_for_message(sub, 1)
        if found is not None:
            got.append(found)
    return got


def transport_extra(transport: str) -> dict[str, Any]:
    """What makes a transport quick enough for tests: curl polls every 20 ms."""
    return {"polling-period": 20_000_000} if transport == "curl" else {}


def inject(server: MailServer, to: str, raw: bytes) -> None:
    """Mail ``raw`` to ``to`` as any account holder could (alice, over SMTPS)."""
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with smtplib.SMTP_SSL(server.host, server.smtps_port, context=context) as smtp:
        smtp.login(server.address("alice"), server.password)
        smtp.sendmail(server.address("alice"), [to], raw)


def folder_subjects(server: MailServer, address: str, folder: str = "INBOX") -> list[bytes]:
    """The Subject header line of every email in ``folder`` ([] when there is no such
    folder), read without changing anything."""
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with imapclient.IMAPClient(server.host, port=server.imaps_port, ssl_context=context) as c:
        c.login(address, server.password)
        if not c.folder_exists(folder):
            return []
        c.select_folder(folder, readonly=True)
        found = c.fetch(c.search("ALL"), ["BODY.PEEK[HEADER.FIELDS (SUBJECT)]"])
        # The server may add an unsolicited FETCH of flags another session changed meanwhile
        # (a group member flagging or moving an email): such an item carries no header.
        lines = (item.get(b"BODY[HEADER.FIELDS (SUBJECT)]") for item in found.values())
        return [line.strip() for line in lines if line is not None]


def write_config(path: Path, config: dict[str, Any]) -> Path:
    """``config`` as an email.yml, private (it holds the password)."""
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump({"email": config}))
    return path


def cli(config: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m emailmw --config CONFIG ARGS...``, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "emailmw", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Peer:
    """A ``tests.email.peer`` process; its stdout lines are collected as they come."""

    def __init__(
        self,
        role: str,
        config: Path,
        name: str,
        *options: str,
        env: dict[str, str] | None = None,
        module: str = "tests.email.peer",
    ) -> None:
        named = [name] if name else []
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, role, str(config), *named, *options],
            cwd=ROOT,
            env=None if env is None else {**os.environ, **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: Recorder[str] = Recorder()
        self.stderr: list[str] = []
        assert self.process.stdout is not None
        assert self.process.stderr is not None
        out, err = self.process.stdout, self.process.stderr

        def read_out() -> None:
            for line in out:
                self.lines(line.rstrip("\n"))

        self._out_reader = threading.Thread(target=read_out, daemon=True)
        self._out_reader.start()
        self._err_reader = threading.Thread(target=lambda: self.stderr.extend(err), daemon=True)
        self._err_reader.start()

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        ok = False
        while not ok and time.monotonic() < deadline:
            ok = self.lines.wait_for(lambda lines: "ready" in lines, 0.2)
            if not ok and self.process.poll() is not None:  # it died: say why, now
                self._err_reader.join(5)  # (its stderr read to the end)
                break
        assert ok, f"peer not ready: {''.join(self.stderr)[-2000:]}"

    def messages(self, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        ok = self.lines.wait_for(lambda lines: len(lines) - 1 >= count, timeout)
        got = [json.loads(line) for line in self.lines.items[1:]]
        assert ok, f"got {len(got)} of {count} messages; stderr: {''.join(self.stderr)[-2000:]}"
        return got

    def pause(self) -> None:
        """SIGSTOP: the process stands still (no thread runs) until :meth:`resume`."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to flush, close or save anything. Returns
        once what it printed before is read to the end (in :attr:`lines`): a line still in
        the pipe when it was killed is not taken for one it never printed."""
        self.process.kill()
        self.process.wait(10)
        self._out_reader.join(10)
        self._err_reader.join(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def other_imap_server(imap_server: str, pool_size: int = 300) -> Iterator[MailServer]:
    """A server of its own whose IMAP is ``imap_server`` (cyrus, courier), or Dovecot with
    capabilities to take away (``dovecot``), started fresh; stopped and removed after."""
    state = Path(f"/tmp/emailmw-{imap_server}-{uuid.uuid4().hex[:8]}")
    server = MailServer(state_dir=state, imap_server=imap_server, pool_size=pool_size)
    server.start(fresh=True)
    yield server
    server.stop()
    shutil.rmtree(state, ignore_errors=True)


def count_in_maildir(server: MailServer, address: str, folder: str, text: bytes) -> int:
    """How many messages holding ``text`` the account's Maildir folder holds (``INBOX``, or
    a folder by its name without any namespace prefix)."""
    maildir = server.maildir(address)
    if folder != "INBOX":
        maildir = maildir / f".{folder}"
    while True:  # (a file renamed while read: a flag changed, new/ to cur/: read again)
        try:
            return sum(1 for d in ("new", "cur") if (maildir / d).is_dir()
                       for f in (maildir / d).iterdir() if text in f.read_bytes())  # fmt: skip
        except FileNotFoundError:
            continue


def wait_filed(
    server: MailServer, address: str, folder: str, text: bytes, count: int, timeout: float = 30
) -> tuple[int, int]:
    """(messages holding ``text`` in ``folder``, those still in INBOX), waiting up to
    ``timeout`` for ``(count, 0)``: a move lands in the folder before it leaves INBOX
    (without MOVE it is COPY, ``\\Deleted`` and an expunge; Dovecot's MOVE on a Maildir is a
    copy and an expunge too)."""

    def found() -> tuple[int, int]:
        return (count_in_maildir(server, address, folder, text),
                count_in_maildir(server, address, "INBOX", text))  # fmt: skip

    more, now = deadline_loop(timeout), found()
    while more() and now != (count, 0):
        time.sleep(0.1)
        now = found()
    return now


def unflagged_repeats(lines: list[dict[str, Any]]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """The messages that reached applications unflagged more than once, with every copy:
    ``lines`` are what subscriber processes printed (``"i"``, ``"run"``, ``"redelivered"``),
    one process's after another's. A message is its index and its publishing run; of its
    copies at most one may come unflagged. Which copy that is says nothing of the order:
    two members print side by side, and a spool's resend (flagged) can be processed before
    the original by another member."""
    copies: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for line in lines:
        copies.setdefault((line["i"], line["run"]), []).append(line)
    return {
        key: found for key, found in copies.items() if sum(not x["redelivered"] for x in found) > 1
    }


def check_batch_delivery_record(server: MailServer) -> None:
    """A group store on ``server`` keeps a batch email's record of how many of its messages
    applications got (#56): it grows, reads back exactly (earlier bits gone), and moves
    with the claim to the member that takes it over."""
    from emailmw._core.config import load_options
    from emailmw._transport.group.imap import ImapGroupStore

    store = ImapGroupStore(load_options({"email": server.config(server.fresh_account())}), "crew")
    try:
        store.offer(b"Subject: emailmw batch of 20: /t\r\nSource-Timestamp: 1\r\n\r\nx\r\n", 0)
        (uid,) = store.inbox()
        store.join("a")
        store.join("b")
        store.claim([uid], "a")
        (claim,) = store.claimed("a")
        seen = []
        for given in (1, 2, 3, 4, 7, 8, 20):
            assert store.mark("a", claim, 1, given)
            seen.append(store.holding("a")[claim].given)
        assert seen == [1, 2, 3, 4, 7, 8, 20]
        store.take([claim], "a", "b")
        (held,) = store.holding("b").values()
        assert (held.delivered, held.given, held.taken) == (1, 20, True)
    finally:
        store.close()


def claim_at_once(server: MailServer, monkeypatch: pytest.MonkeyPatch) -> list[Holding]:
    """Two members of group ``crew`` on a server without MOVE claim one message at once:
    both read its flags before either marks it, both copy it before either expunges (as
    when the claim lock was broken while its holder only stalled). What the two claims
    folders hold then."""
    options = load_options({"email": server.config(server.fresh_account())})
    stores = {"a": ImapGroupStore(options, "crew"), "b": ImapGroupStore(options, "crew")}
    read, copied = threading.Barrier(2, timeout=30), threading.Barrier(2, timeout=30)
    first_read: set[int] = set()
    real_get_flags = imapclient.IMAPClient.get_flags

    def get_flags(client: Any, *args: Any, **kwargs: Any) -> Any:
        flags = real_get_flags(client, *args, **kwargs)
        if threading.get_ident() not in first_read:  # both read before either marks
            first_read.add(threading.get_ident())
            read.wait()
        return flags

    def copy_together(client: Any, uids: list[int], folder: str) -> None:
        copied.wait()  # both copy before either expunges
        client.copy(uids, folder)
        copied.wait()
        client.delete_messages(uids, silent=True)
        client.expunge()

    try:
        stores["a"].offer(b"Subject: /work\r\nSource-Timestamp: 1\r\n\r\nm0\r\n", 0)
        (uid,) = stores["a"].inbox()
        with monkeypatch.context() as patched, ThreadPoolExecutor(2) as pool:
            patched.setattr(imapclient.IMAPClient, "get_flags", get_flags)
            patched.setattr(group_imap, "move_uids", copy_together)
            claims = [pool.submit(stores[m].claim, [uid], m) for m in stores]
            for claim in claims:
                claim.result(60)
        assert stores["a"].inbox() == []
        return [h for m, store in stores.items() for h in store.holding(m).values()]
    finally:
        for store in stores.values():
            store.close()
