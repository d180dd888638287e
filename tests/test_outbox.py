"""The outbox's guarantees, with a scripted SMTP connection: what send() promises when it
returns, what is retried, where failures go, and the spool across a process's death
(the same with real processes and SIGKILL is in tests/email/test_reliability.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from emailmw import ConfigError, ConnectError, Email, SendError
from emailmw._core.config import load_options
from emailmw._transport import outbox as outbox_module
from emailmw._transport.errors import recipients_refused
from emailmw._transport.outbox import Outbox, Submission, Submitter


class Scripted(Submitter):
    """Answers each submit() with the next scripted outcome (None: accepted), then
    accepts everything. Records what the server accepted."""

    server = "smtps://scripted:465"

    def __init__(self, *outcomes: Exception | None, gate: threading.Event | None = None) -> None:
        self.outcomes = list(outcomes)
        self.accepted: list[str] = []
        self.attempts = 0
        self.gate = gate
        self.closed = False

    def submit(self, envelope: Submission) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        self.attempts += 1
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome
        self.accepted.append(envelope.message_id)

    def close(self) -> None:
        self.closed = True


def _outbox(submitter: Submitter, tmp_path: Path | None = None, **extra: object) -> Outbox:
    config: dict[str, object] = {
        "user": {
            "url-smtp": "smtps://scripted",
            "url-imap": "imaps://scripted",
            "username": "me@example.test",
            "password": "pw",
        },
        "recipients": {"to": "you@example.test"},
        "timeout": 2,
        **extra,
    }
    if tmp_path is not None:
        config["spool"] = str(tmp_path / "spool")
    return Outbox(submitter, load_options(config))


def _email(n: int) -> Email:
    return Email(f"t{n}", "b", "me@example.test", "you@example.test", message_id=f"<{n}@x>")


TEMPORARY = SendError("451 try later", temporary=True)
PERMANENT = SendError("550 no such user", temporary=False)


def test_server_returns_once_accepted_retrying_what_fails_for_now(
    closing: Callable[[Outbox], Outbox],
) -> None:
    submitter = Scripted(ConnectError("refused"), TEMPORARY, None)
    outbox = closing(_outbox(submitter))
    outbox.send(_email(1))  # the default guarantee: returns once accepted
    assert submitter.accepted == ["<1@x>"]
    assert submitter.attempts == 3


def test_server_raises_a_permanent_refusal_at_once(closing: Callable[[Outbox], Outbox]) -> None:
    submitter = Scripted(PERMANENT)
    outbox = closing(_outbox(submitter))
    with pytest.raises(SendError, match="550"):
        outbox.send(_email(1))
    assert submitter.attempts == 1
    assert outbox.flush(1)  # the caller was told: nothing left for flush()


def test_server_gives_up_after_the_timeout(closing: Callable[[Outbox], Outbox]) -> None:
    submitter = Scripted(*[TEMPORARY] * 100)
    outbox = closing(_outbox(submitter, timeout=0.5))
    with pytest.raises(SendError, match="not accepted within"):
        outbox.send(_email(1))
    assert submitter.accepted == []


def test_memory_returns_at_once_and_a_refusal_goes_to_its_owner_only(
    closing: Callable[[Outbox], Outbox],
) -> None:
    gate = threading.Event()
    submitter = Scripted(PERMANENT, gate=gate)
    outbox = closing(_outbox(submitter))
    failed: list[tuple[str | None, SendError]] = []
    outbox.send(
        _email(1), guarantee="memory", on_failure=lambda e, err: failed.append((e.message_id, err))
    )
    outbox.send(_email(2), guarantee="memory")
    assert submitter.attempts == 0  # both returned before the server said anything
    gate.set()
    assert outbox.flush(5)  # no failure without an owner: nothing to raise
    assert [message_id for message_id, _ in failed] == ["<1@x>"]
    assert submitter.accepted == ["<2@x>"]


def test_one_queue_keeps_the_order_across_guarantees(
    tmp_path: Path, closing: Callable[[Outbox], Outbox]
) -> None:
    submitter = Scripted()
    outbox = closing(_outbox(submitter, tmp_path))
    outbox.send(_email(1), guarantee="memory")
    outbox.send(_email(2), guarantee="spool")
    outbox.send(_email(3))
    assert submitter.accepted == ["<1@x>", "<2@x>", "<3@x>"]


class Hung(Submitter):
    """A connection that never gets an answer: what a process sees before it is killed."""

    server = "smtps://hung:465"

    def __init__(self) -> None:
        self.release = threading.Event()

    def submit(self, envelope: Submission) -> None:
        self.release.wait()
        raise ConnectError("gone")

    def close(self) -> None:
        pass


def test_the_spool_outlives_its_process(tmp_path: Path) -> None:
    hung = Hung()
    first = _outbox(hung, tmp_path)
    for n in range(3):
        first.send(_email(n), guarantee="spool")
    spool = tmp_path / "spool"
    assert len(list(spool.glob("*.msg"))) == 3  # on disk before send() returned
    # the process dies here: nothing was sent, and the kernel releases its spool lock
    first._spool.close()  # type: ignore[union-attr]
    second_submitter = Scripted()
    second = _outbox(second_submitter, tmp_path)
    try:
        assert second.flush(5)
        assert second_submitter.accepted == ["<0@x>", "<1@x>", "<2@x>"]
        assert list(spool.glob("*.msg")) == []
    finally:
        second.close()
        first._stopping.set()  # end the dead process's thread
        hung.release.set()


def test_a_refused_spooled_email_is_kept_aside_not_deleted(
    tmp_path: Path, closing: Callable[[Outbox], Outbox]
) -> None:
    outbox = closing(_outbox(Scripted(PERMANENT), tmp_path))
    failed: list[str] = []
    outbox.send(_email(1), guarantee="spool", on_failure=lambda e, err: failed.append(str(err)))
    assert outbox.flush(5)
    assert failed
    assert len(list((tmp_path / "spool" / "failed").glob("*.msg"))) == 1


def test_a_spool_is_used_by_one_process_at_a_time(
    tmp_path: Path, closing: Callable[[Outbox], Outbox]
) -> None:
    closing(_outbox(Scripted(), tmp_path))
    with pytest.raises(ConfigError, match="in use by another process"):
        _outbox(Scripted(), tmp_path)


def test_the_spool_guarantee_needs_a_spool(closing: Callable[[Outbox], Outbox]) -> None:
    outbox = closing(_outbox(Scripted()))
    with pytest.raises(ConfigError, match="spool"):
        outbox.send(_email(1), guarantee="spool")


@pytest.mark.parametrize(
    ("last", "temporary"), [(0, True), (250, True), (354, True), (451, True), (554, False)]
)
def test_a_curl_transfer_cut_short_is_temporary_unless_the_server_refused(
    last: int, temporary: bool
) -> None:
    """libcurl's broken pipe mid-upload (the server restarting after its 354) is retried:
    the server accepted nothing; was: permanent, because the last answer was not a 4xx
    (publish() raised during a Postfix restart). A 5xx refusal stays permanent."""
    pycurl = pytest.importorskip("pycurl")
    from emailmw._transport.errors import curl_errors

    with (
        pytest.raises(SendError) as raised,
        curl_errors("smtps://scripted:465", "sending", SendError, lambda: last),
    ):
        raise pycurl.error(pycurl.E_RECV_ERROR, "Send failure: Broken pipe")
    assert raised.value.temporary is temporary


# ----------------------------------------------------------------------------- recipients


class Mailboxes(Submitter):
    """A server whose recipients each answer as ``answers`` says (code, text; absent:
    accepted), as the real submitters report it (``recipients_refused``); an answer given
    as a list is used up one transaction at a time. Records (Message-ID, recipient) of
    what it accepted."""

    server = "smtps://mailboxes:465"

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.accepted: list[tuple[str, str]] = []
        self.transactions: list[tuple[str, ...]] = []

    def submit(self, envelope: Submission) -> None:
        self.transactions.append(envelope.recipients)
        refused: dict[str, tuple[int, str]] = {}
        for recipient in envelope.recipients:
            answer = self.answers.get(recipient)
            if isinstance(answer, list):
                answer = answer.pop(0) if answer else None
            if answer is None:
                self.accepted.append((envelope.message_id, recipient))
            else:
                refused[recipient] = answer
        if refused:
            raise recipients_refused(
                envelope.message_id, refused, self.server,
                accepted_others=len(refused) < len(envelope.recipients),
            )  # fmt: skip

    def close(self) -> None:
        pass


def _to(n: int, *recipients: str) -> Email:
    return Email(f"t{n}", "b", "me@example.test", recipients, message_id=f"<{n}@x>")


FULL = (552, "5.2.2 Mailbox full: quota exceeded")
FULL_FOR_NOW = (452, "4.2.2 The email account that you tried to reach is over quota")


def test_a_full_mailbox_concerns_its_recipient_only(closing: Callable[[Outbox], Outbox]) -> None:
    """#58: ``552 5.2.2`` for one of two recipients: the other has the email, the full one
    is reported to the sender (not delivered, in the server's words), and the emails after
    it go at once. Was: taken for throttling ("quota"): all sending held, doubling to 300 s,
    never reported."""
    server = Mailboxes({"full@x": FULL})
    outbox = closing(_outbox(server, timeout=5))
    failed: list[SendError] = []
    outbox.send(_to(1, "ok@x", "full@x"), guarantee="memory",
                on_failure=lambda _, error: failed.append(error))  # fmt: skip
    outbox.send(_to(2, "ok@x"))  # (server: returns once accepted)
    assert server.accepted == [("<1@x>", "ok@x"), ("<2@x>", "ok@x")]
    assert outbox.flush(5)
    (error,) = failed
    assert "not delivered to full@x (552 5.2.2 Mailbox full: quota exceeded)" in str(error)
    assert dict(error.recipients) == {"full@x": FULL}
    assert not error.temporary
    with pytest.raises(SendError, match=r"not delivered to full@x \(552 5\.2\.2"):
        outbox.send(_to(3, "full@x", "ok@x"))
    assert server.accepted[-1] == ("<3@x>", "ok@x")
    assert server.transactions.count(("ok@x",)) == 1  # (never sent twice to the accepted)


def test_a_mailbox_full_for_now_gets_it_later_and_holds_nothing_up(
    closing: Callable[[Outbox], Outbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``452 4.2.2``: the recipient is tried again later, on its own, while everything
    else is sent; once its mailbox has room it has the email. Was: the whole outbox
    waited behind it."""
    monkeypatch.setattr(outbox_module, "_DEFER_MIN", 0.3)
    server = Mailboxes({"full@x": [FULL_FOR_NOW, FULL_FOR_NOW]})
    outbox = closing(_outbox(server, timeout=5))
    outbox.send(_to(1, "ok@x", "full@x"), guarantee="memory")
    for n in range(2, 5):
        outbox.send(_to(n, "ok@x"))  # (returns once accepted: not behind email 1)
    assert ("<1@x>", "full@x") not in server.accepted
    assert outbox.flush(10)
    assert server.accepted.count(("<1@x>", "full@x")) == 1
    assert server.accepted.count(("<1@x>", "ok@x")) == 1
    assert server.transactions[-1] == ("full@x",)  # (tried again alone)


def test_recipients_over_a_transaction_s_limit_go_in_another(
    closing: Callable[[Outbox], Outbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``552 5.5.3 Too many recipients``: those refused are sent in a later transaction
    (was: taken for throttling)."""
    monkeypatch.setattr(outbox_module, "_DEFER_MIN", 0.1)
    server = Mailboxes({"c@x": [(552, "5.5.3 Too many recipients")]})
    outbox = closing(_outbox(server, timeout=5))
    outbox.send(_to(1, "a@x", "b@x", "c@x"), guarantee="memory")
    assert outbox.flush(10)
    assert sorted(r for _, r in server.accepted) == ["a@x", "b@x", "c@x"]


def test_a_throttled_recipient_holds_sending_and_only_it_is_sent_again(
    closing: Callable[[Outbox], Outbox],
) -> None:
    """A RCPT answered ``450 4.7.1`` (the sender's rate): all sending holds, then only the
    refused recipient gets it (the accepted one never twice)."""
    server = Mailboxes({"b@x": [(450, "4.7.1 Error: too much mail from 127.0.0.1")]})
    outbox = closing(_outbox(server, timeout=5))
    outbox.send(_to(1, "a@x", "b@x"))
    assert sorted(server.accepted) == [("<1@x>", "a@x"), ("<1@x>", "b@x")]
    assert server.transactions == [("a@x", "b@x"), ("b@x",)]


def test_a_spooled_email_left_by_a_dead_process_waits_for_a_mailbox_full_for_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spool's leftover (its process died) whose one recipient is full for now: the
    other gets it once, the full one once it has room, and the spool holds it for that
    recipient alone meanwhile. (Read from its file, it was not deferred: it went to the
    spool's failed/ folder, never delivered to the full one.)"""
    monkeypatch.setattr(outbox_module, "_DEFER_MIN", 0.3)
    hung = Hung()
    first = _outbox(hung, tmp_path)
    first.send(_to(1, "ok@x", "full@x"), guarantee="spool")
    first._spool.close()  # type: ignore[union-attr]  # (the process dies here)
    server = Mailboxes({"full@x": [FULL_FOR_NOW]})
    second = _outbox(server, tmp_path)
    try:
        assert second.flush(10)
        assert sorted(server.accepted) == [("<1@x>", "full@x"), ("<1@x>", "ok@x")]
        spool = tmp_path / "spool"
        assert list(spool.glob("*.msg")) == []
        assert list(spool.glob("failed/*")) == []
    finally:
        second.close()
        first._stopping.set()
        hung.release.set()


def test_curl_reads_each_recipient_s_answer_from_its_trace() -> None:
    """What libcurl's trace says of each RCPT: a refusal with its words, one with a bare
    code (the reply's text is optional), an acceptance; a multi-line answer by its last
    line."""
    import pycurl

    from emailmw._transport.curl import CurlContext

    seen = SimpleNamespace(_rcpt=None, refused={}, last_reply="", _verbose=False,
                           size_limit=None)  # fmt: skip
    out, into = pycurl.INFOTYPE_HEADER_OUT, pycurl.INFOTYPE_HEADER_IN
    for kind, data in [
        (out, b"RCPT TO:<full@x>\r\n"), (into, b"552 5.2.2 Mailbox full\r\n"),
        (out, b"RCPT TO:<bare@x>\r\n"), (into, b"550\r\n"),
        (out, b"RCPT TO:<ok@x>\r\n"), (into, b"250 2.1.5 Ok\r\n"),
        (out, b"RCPT TO:<long@x>\r\n"), (into, b"450-4.2.2 first\r\n"),
        (into, b"450 4.2.2 over quota\r\n"),
    ]:  # fmt: skip
        CurlContext._debug(seen, kind, data)  # type: ignore[arg-type]
    assert seen.refused == {
        "full@x": (552, "5.2.2 Mailbox full"), "bare@x": (550, ""),
        "long@x": (450, "4.2.2 over quota"),
    }  # fmt: skip


def test_a_batch_of_one_publisher_s_consecutive_messages_says_where_it_starts() -> None:
    """What a stateful group member reads of a batch before it claims it (#62): the first
    message's Publisher-GID and Publisher-Sequence-Number, only when the batch is one
    publisher's consecutive messages (otherwise it names no place in any stream)."""
    from emailmw import Headers

    def message(gid: str, seq: int) -> Email:
        headers = {"Source-Timestamp": str(100 + seq), "Publisher-GID": gid,
                   "Publisher-Sequence-Number": str(seq)}  # fmt: skip
        return Email("/t", "x", "a@x.test", ("b@x.test",), headers=Headers(headers))

    shared = outbox_module._shared_headers
    assert shared([message("g", 4), message("g", 5)]) == [
        ("Source-Timestamp", "104"), ("Publisher-GID", "g"), ("Publisher-Sequence-Number", "4")
    ]  # fmt: skip
    assert shared([message("g", 4), message("g", 6)]) == [("Source-Timestamp", "104")]
    assert shared([message("g", 4), message("h", 5)]) == [("Source-Timestamp", "104")]
