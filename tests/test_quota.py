"""The provider's budget (``limits:``): the pacing state machine alone, on a simulated
clock, then the outbox that obeys it, with a scripted SMTP connection (the same over the
real server is in ``tests/email/test_quota.py``)."""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from emailmw import ConfigError, Email, SendError
from emailmw._core.config import NO_BATCH, SendLimits, load_options
from emailmw._core.packing import batch_parts
from emailmw._transport.base import CONTROL, ReadersBatch
from emailmw._transport.errors import is_throttle
from emailmw._transport.ledger import DAY, SendLedger, sent_within
from emailmw._transport.outbox import Outbox, Submission
from emailmw._transport.quota import SendBudget

from .test_outbox import Scripted


def _simulate(budget: SendBudget, seconds: float, every: float) -> list[float]:
    """Demand an email every ``every`` s for ``seconds``; send whenever the budget lets."""
    sent: list[float] = []
    now, wanted = 0.0, 0
    while now < seconds:
        wanted = max(wanted, int(now / every) + 1)
        if len(sent) < wanted and budget.delay(now) == 0:
            budget.spent(now)
            sent.append(now)
            continue
        now += min(budget.delay(now) or every, every)
    return sent


def _most_in_window(sent: list[float], window: float) -> int:
    return max((bisect.bisect_left(sent, t + window) - i for i, t in enumerate(sent)), default=0)


def test_a_minute_limit_is_never_exceeded_and_is_used_evenly() -> None:
    """20 a minute against a 10 Hz demand for 10 minutes: never more than 20 in any 60 s
    (the hard cap), about 20 a minute sustained, and spread (a burst of 2, then one every
    3 s; the cap makes one gap in a minute 6 s), not 20 at once and a minute of silence."""
    sent = _simulate(SendBudget(SendLimits(emails_per_minute=20)), 600, 0.1)
    assert _most_in_window(sent, 60) <= 20
    assert 195 <= len(sent) <= 201
    assert _most_in_window(sent, 6) <= 3
    assert max(b - a for a, b in itertools.pairwise(sent)) <= 6.0 + 1e-9


def test_a_day_limit_lets_an_hours_share_go_at_once_then_paces() -> None:
    budget = SendBudget(SendLimits(emails_per_day=2400))  # 100 an hour
    sent = _simulate(budget, 7200, 1.0)  # one a second wanted
    assert sent[:100] == [float(i) for i in range(100)]  # an hour's share without waiting
    assert 290 <= len(sent) <= 302  # then one every 36 s
    assert _most_in_window(sent, 86_400) <= 2400


def test_the_hard_cap_holds_when_the_day_is_spent_and_frees_as_sends_age_out() -> None:
    budget = SendBudget(SendLimits(emails_per_day=48))
    for i in range(48):
        now = i * 1800.0  # one every half hour: the pace allows it
        assert budget.delay(now) == 0
        budget.spent(now)
    now = 47 * 1800.0 + 1
    assert budget.delay(now) > 0
    assert budget.used(now) == {"emails-per-day": (48, 48)}
    assert budget.delay(86_400.0 + 1) == 0  # the first send aged out


def test_a_throttled_server_holds_everything() -> None:
    budget = SendBudget(SendLimits())
    assert not budget.active
    budget.throttled(10.0, 30.0)
    assert budget.delay(20.0) == pytest.approx(20.0)
    assert budget.holder(20.0) == "the server throttles sending"
    assert budget.delay(41.0) == 0


def test_the_days_budget_forecast_uses_the_recent_rate() -> None:
    budget = SendBudget(SendLimits(emails_per_day=2400))
    assert budget.day_left_s(0.0) is None
    for i in range(60):
        budget.spent(float(i * 10))  # 6 a minute
    assert budget.day_left_s(595.0) == pytest.approx((2400 - 60) / (60 / 600))


@pytest.mark.parametrize(
    ("code", "text", "throttle"),
    [
        (421, "4.7.0 Try again later, closing connection", True),
        (450, "4.7.1 Error: too much mail from 127.0.0.1", True),
        (550, "5.4.5 Daily user sending quota exceeded", True),
        (452, "4.5.3 Too many recipients", False),  # (the transaction's: not the sender's rate)
        (432, "4.3.2 STOREDRV.ClientSubmit; sender thread limit exceeded", True),  # Exchange
        (552, "5.2.2 Mailbox full: quota exceeded", False),  # (one recipient's mailbox)
        (452, "4.2.2 The email account that you tried to reach is over quota", False),
        (552, "5.5.3 Too many recipients", False),
        (550, "5.7.1 Too many invalid recipients", False),
        (550, "5.1.1 user unknown", False),
        (451, "4.3.0 Temporary lookup failure", False),
        (250, "ok, rate limit noted", False),
    ],
)
def test_what_counts_as_throttling(code: int, text: str, throttle: bool) -> None:
    assert is_throttle(code, text) is throttle


def test_limits_are_checked_when_read() -> None:
    base = {"intraprocess": True}
    with pytest.raises(ConfigError, match=r"key 'email.limits.emails-per-day'.*integer >= 1"):
        load_options({"email": {**base, "limits": {"emails-per-day": 0}}})
    with pytest.raises(ConfigError, match="unknown key"):
        load_options({"email": {**base, "limits": {"emails-per-hour": 5}}})
    options = load_options({"email": {**base, "limits": {"emails-per-minute": 20}}})
    assert options.limits == SendLimits(emails_per_minute=20)


def _outbox(submitter: Scripted, **extra: object) -> Outbox:
    config: dict[str, object] = {
        "user": {"url-smtp": "smtps://scripted", "url-imap": "imaps://scripted",
                 "username": "me@example.test", "password": "pw"},
        "recipients": {"to": "you@example.test"},
        "timeout": 5,
        **extra,
    }  # fmt: skip
    return Outbox(submitter, load_options(config))


def _email(n: int, to: tuple[str, ...] = ("you@example.test",)) -> Email:
    return Email("/t", f"m{n}", "me@example.test", to, message_id=f"<{n}@x>")


class Recording(Scripted):
    def __init__(self, *outcomes: Exception | None, gate: threading.Event | None = None) -> None:
        super().__init__(*outcomes, gate=gate)
        self.envelopes: list[tuple[float, Submission]] = []

    def submit(self, envelope: Submission) -> None:
        self.envelopes.append((time.monotonic(), envelope))
        super().submit(envelope)


def test_the_outbox_paces_and_batches_grow_instead(closing: Callable[[Outbox], Outbox]) -> None:
    """60 a minute (one a second, a burst of 6) and 40 messages at once, batching allowed:
    all accepted, in at most 6 + 2 emails (the batches grew), none lost."""
    submitter = Recording()
    outbox = closing(_outbox(submitter, limits={"emails-per-minute": 60},
                             batch={"linger-ms": 5}))  # fmt: skip
    for i in range(40):
        outbox.send(_email(i), guarantee="memory")
    assert outbox.flush(10)
    assert len(submitter.envelopes) <= 8
    carried = sum(env.raw.count(b"Message-ID: <") for _, env in submitter.envelopes)
    assert carried >= 40


def test_pacing_is_said_once_while_it_lasts_not_once_an_email(
    closing: Callable[[Outbox], Outbox], caplog: pytest.LogCaptureFixture
) -> None:
    """(#58: the pacing line came once per email) 300 a minute, a burst of 30: 40 emails
    sent one after the other, the last 10 each waiting its slot, are one pacing episode:
    one line."""
    submitter = Recording()
    outbox = closing(_outbox(submitter, limits={"emails-per-minute": 300}))
    with caplog.at_level(logging.INFO, logger="emailmw"):
        for i in range(40):
            outbox.send(_email(i))  # (the server guarantee: accepted before the next)
    assert len(submitter.envelopes) == 40
    lines = [r.getMessage() for r in caplog.records if "sending paced by" in r.getMessage()]
    assert len(lines) == 1, lines


def test_a_throttled_sender_without_limits_is_told_which_to_set(
    closing: Callable[[Outbox], Outbox], caplog: pytest.LogCaptureFixture
) -> None:
    too_much = SendError("421 4.7.0 Try again later", temporary=True, throttled=True)
    for limits, suggested in (({}, True), ({"emails-per-day": 500}, False)):
        caplog.clear()
        submitter = Recording(too_much)
        outbox = closing(_outbox(submitter, limits=limits))
        with caplog.at_level(logging.WARNING, logger="emailmw"):
            outbox.send(_email(0), guarantee="memory")
            assert outbox.flush(10)
        (line,) = [r.getMessage() for r in caplog.records if "throttles" in r.getMessage()]
        assert ("set email.limits (emails-per-minute, emails-per-day)" in line) == suggested


def test_a_throttling_answer_holds_sending_and_loses_nothing(
    closing: Callable[[Outbox], Outbox],
) -> None:
    """The server says 450 4.7.1 (too much mail), then 550 5.4.5 (the day's quota: a 5xx,
    yet to be waited out): both retried after a hold (1 s, then 2 s), accepted, in order."""
    too_much = SendError("450 4.7.1 too much mail", temporary=True, throttled=True)
    quota = SendError("550 5.4.5 Daily user sending quota exceeded", throttled=True)
    submitter = Recording(too_much, quota)
    outbox = closing(_outbox(submitter))
    for i in range(3):
        outbox.send(_email(i), guarantee="memory")
    assert outbox.flush(15)
    assert submitter.accepted == ["<0@x>", "<1@x>", "<2@x>"]
    times = [t for t, _ in submitter.envelopes]
    assert times[1] - times[0] >= 0.95
    assert times[2] - times[1] >= 1.95


def test_recipients_go_in_chunks_and_an_accepted_chunk_is_not_sent_again(
    closing: Callable[[Outbox], Outbox],
) -> None:
    to = tuple(f"r{i}@example.test" for i in range(5))
    submitter = Recording(None, SendError("451 try later", temporary=True))
    outbox = closing(_outbox(submitter, limits={"recipients-per-email": 2}))
    outbox.send(_email(0, to=to))
    chunks = [env.recipients for _, env in submitter.envelopes]
    assert chunks == [
        ("r0@example.test", "r1@example.test"),
        ("r2@example.test", "r3@example.test"),  # refused for now
        ("r2@example.test", "r3@example.test"),
        ("r4@example.test",),
    ]


def test_no_limits_no_pacing(closing: Callable[[Outbox], Outbox], tmp_path: Path) -> None:
    submitter = Recording()
    outbox = closing(_outbox(submitter))
    start = time.monotonic()
    for i in range(20):
        outbox.send(_email(i))
    assert time.monotonic() - start < 2
    assert len(submitter.envelopes) == 20


def test_a_provider_profile_fills_in_what_is_left_out_and_every_value_overrides() -> None:
    recipients = {"recipients": {"to": "a@b.test"}}
    gmail = load_options({"email": {"provider": "gmail", **recipients, "user": {
        "username": "r@gmail.com", "password-command": "pass gmail"}}})  # fmt: skip
    assert gmail.user is not None
    assert str(gmail.user.smtp) == "smtps://smtp.gmail.com:465"
    assert gmail.limits == SendLimits(
        emails_per_day=500, recipients_per_email=100, max_connections=15
    )
    mine = load_options({"email": {"provider": "exchange-online", **recipients,
                                   "limits": {"emails-per-minute": 10},
                                   "user": {"username": "r@contoso.com", "auth": "oauthbearer",
                                            "token-command": "t",
                                            "url-imap": "imaps://imap.contoso.com"}}})  # fmt: skip
    assert mine.user is not None
    assert (mine.user.mechanism, str(mine.user.imap)) == (
        "oauthbearer",
        "imaps://imap.contoso.com:993",
    )
    assert str(mine.user.smtp) == "smtp://smtp.office365.com:587"
    assert mine.limits == SendLimits(
        emails_per_minute=10, emails_per_day=10000, recipients_per_email=500
    )
    # Outlook.com, a personal account: its own submission server, a personal account's limits
    personal = load_options({"email": {"provider": "outlook", **recipients, "user": {
        "username": "r@outlook.com", "token-command": "t"}}})  # fmt: skip
    assert personal.user is not None
    assert str(personal.user.smtp) == "smtp://smtp-mail.outlook.com:587"
    assert personal.limits == SendLimits(emails_per_day=300, recipients_per_email=100)
    with pytest.raises(ConfigError, match=r"key 'email\.provider': expected one of gmail"):
        load_options({"email": {"provider": "hotmail", **recipients}})


def test_a_receiver_refused_for_its_connection_limit_backs_off_to_30_s_not_1() -> None:
    from emailmw import ConnectionLimitError, ReceiveError
    from emailmw._delivery.polling import next_backoff

    waits, backoff = [], 0.1
    for _ in range(12):
        wait, backoff = next_backoff(backoff, ConnectionLimitError("full", server="imaps://x"))
        waits.append(wait)
    assert waits[:3] == [0.1, 0.2, 0.4]
    assert waits[-1] == 30.0
    assert sum(waits) > 120  # a dozen logins in over two minutes, not in twelve seconds
    assert next_backoff(8.0, ReceiveError("gone")) == (1.0, 1.0)


# ------------------------------------------------------------------ the sending ledger


def test_the_ledger_is_read_by_every_user_of_it_and_kept_to_a_day(tmp_path: Path) -> None:
    """Two users of one ledger file (two processes, as far as the file knows) read what
    each other recorded, once each; a ledger grown past 1 MB is rewritten with the last
    day's lines when opened, and a user that read it before reads only what is new."""
    path = tmp_path / "sent" / "me"
    now = time.time()
    first = SendLedger(path, now=now)
    second = SendLedger(path, now=now)
    first.record(now)
    assert second.read_new() == [pytest.approx(now)]
    second.record(now + 1)
    assert first.read_new() == [pytest.approx(now), pytest.approx(now + 1)]
    assert first.read_new() == []
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    with path.open("ab") as f:  # two days of old sends, and a torn line
        f.write(b"".join(b"%.3f\n" % (now - 2 * DAY + i) for i in range(80_000)) + b"x\n")
    assert path.stat().st_size > 1 << 20
    SendLedger(path, now=now + 2)  # a third process starts: the file keeps the last day
    assert sent_within(path, now + 2, DAY) == 2
    assert path.stat().st_size < 100
    second.record(now + 3)
    assert first.read_new() == [pytest.approx(now + 3)]


def test_processes_sending_as_one_account_share_its_budget(tmp_path: Path) -> None:
    """Two processes each send 8 emails under ``emails-per-minute: 60`` (a burst of 6,
    then one a second): together they keep to one budget, the 16th going at least 9 s
    after the first (each alone would finish in about 2 s: 16 in 2 s, double the limit's
    pace)."""
    script = tmp_path / "sender.py"
    script.write_text(
        "import json, sys, time\n"
        "from emailmw._core.config import load_options\n"
        "from emailmw._transport.outbox import Outbox\n"
        "from tests.test_outbox import Scripted\n"
        "from tests.test_quota import _email\n"
        "class Timed(Scripted):\n"
        "    times = []\n"
        "    def submit(self, envelope):\n"
        "        self.times.append(time.time())\n"
        "        super().submit(envelope)\n"
        "options = load_options({'user': {'url-smtp': 'smtps://scripted',\n"
        "    'url-imap': 'imaps://scripted', 'username': 'me@example.test',\n"
        "    'password': 'pw'}, 'recipients': {'to': 'you@example.test'},\n"
        "    'limits': {'emails-per-minute': 60}})\n"
        "sys.stdin.readline()\n"
        "outbox = Outbox(Timed(), options)\n"
        "for i in range(8):\n"
        "    outbox.send(_email(int(sys.argv[1]) * 100 + i))\n"
        "assert outbox.flush(60)\n"
        "outbox.close()\n"
        "print(json.dumps(Timed.times))\n"
    )
    root = str(Path(__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": root}
    processes = [
        subprocess.Popen([sys.executable, str(script), str(n)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, cwd=root, env=env)
        for n in range(2)
    ]  # fmt: skip
    outputs = [p.communicate("go\n", timeout=120)[0] for p in processes]
    assert all(p.returncode == 0 for p in processes)
    times = sorted(t for out in outputs for t in json.loads(out))
    assert len(times) == 16
    assert times[-1] - times[0] >= 9.0, [round(t - times[0], 2) for t in times]


def _wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _carried(envelope: Submission) -> int:
    parts = batch_parts(envelope.raw)
    return 1 if parts is None else len(parts)


def test_mail_queued_while_its_readers_were_unknown_goes_batched_once_they_answered(
    closing: Callable[[Outbox], Outbox],
) -> None:
    """(#57: after a reader's server was down past its record, a talker at 4x the budget
    queued single emails and batched mail waited behind them for minutes) 30 a minute,
    20 messages queued while no reader is known: the first go single, paced; once the
    readers answered, what is still queued leaves as one batch, not one email every 2 s.
    While they stay unknown (a C++ reader), each goes single."""
    submitter = Recording()
    outbox = closing(_outbox(submitter, limits={"emails-per-minute": 30}))
    known = threading.Event()
    policy = ReadersBatch(5, 100, 1 << 20, allowed=known.is_set)
    for i in range(20):
        outbox.send(_email(i), guarantee="memory", batch=policy)
    assert _wait_for(lambda: len(submitter.envelopes) >= 4, 30)
    singles = len(submitter.envelopes)
    assert all(_carried(env) == 1 for _, env in submitter.envelopes)
    known.set()
    assert outbox.flush(10)  # (single, the other 16 would take 32 s)
    assert len(submitter.envelopes) <= singles + 2
    assert sum(_carried(env) for _, env in submitter.envelopes) == 20

    unknown = Recording()
    outbox = closing(_outbox(unknown, limits={"emails-per-minute": 600}))
    never = ReadersBatch(5, 100, 1 << 20, allowed=lambda: False)
    for i in range(8):
        outbox.send(_email(i), guarantee="memory", batch=never)
    assert outbox.flush(10)
    assert [_carried(env) for _, env in unknown.envelopes] == [1] * 8


def test_readers_that_withdraw_before_mail_leaves_get_it_single(
    closing: Callable[[Outbox], Outbox],
) -> None:
    """Batching is asked when an email leaves: mail queued while its readers read batches
    goes single when one withdrew before it left (a C++ reader may be left), whether it
    was still queued (the server busy with an email) or gathering while the budget held
    it."""
    gate = threading.Event()
    submitter = Recording(gate=gate)
    outbox = closing(_outbox(submitter))
    reads = threading.Event()
    reads.set()
    policy = ReadersBatch(5, 100, 1 << 20, allowed=reads.is_set)
    outbox.send(_email(0), guarantee="memory")  # (in the server's hands: the rest queue)
    for i in range(1, 7):
        outbox.send(_email(i), guarantee="memory", batch=policy)
    reads.clear()
    gate.set()
    assert outbox.flush(10)
    assert [_carried(env) for _, env in submitter.envelopes] == [1] * 7

    paced = Recording()
    outbox = closing(_outbox(paced, limits={"emails-per-minute": 6}))  # (then 1 in 10 s)
    reads.set()
    outbox.send(_email(10), guarantee="memory")  # (the burst: sent at once)
    assert _wait_for(lambda: len(paced.envelopes) == 1, 10)
    with_log = logging.getLogger("emailmw")
    holds: list[str] = []
    catch = logging.Handler()
    catch.emit = lambda record: holds.append(record.getMessage())  # type: ignore[method-assign]
    with_log.addHandler(catch)
    previous = with_log.level
    with_log.setLevel(logging.INFO)
    try:
        for i in range(11, 17):
            outbox.send(_email(i), guarantee="memory", batch=policy)
        # (the six gather while the budget holds them 10 s; a reader withdraws meanwhile)
        assert _wait_for(lambda: any("sending paced by" in line for line in holds), 10)
        reads.clear()
        assert _wait_for(lambda: len(paced.envelopes) == 2, 20)
    finally:
        with_log.removeHandler(catch)
        with_log.setLevel(previous)
    assert _carried(paced.envelopes[1][1]) == 1  # (was: the six as one batch)


def test_control_mail_goes_ahead_of_queued_data(closing: Callable[[Outbox], Outbox]) -> None:
    """(#57) A probe or a reader record queued behind paced data goes next, not after it:
    it decides how the data goes. In order among control mail."""
    submitter = Recording()
    outbox = closing(_outbox(submitter, limits={"emails-per-minute": 60}))
    for i in range(10):
        outbox.send(_email(i), guarantee="memory", batch=NO_BATCH)
    assert _wait_for(lambda: len(submitter.envelopes) >= 6, 10)  # (the burst; then 1 a s)
    sent = len(submitter.envelopes)
    outbox.send(_email(100), guarantee="memory", batch=CONTROL)
    outbox.send(_email(101), guarantee="memory", batch=CONTROL)
    assert outbox.flush(15)
    order = [env.message_id for _, env in submitter.envelopes]
    # (after what was sent, and at most the one email the worker had in hand)
    assert order.index("<100@x>") <= sent + 1
    assert order.index("<101@x>") == order.index("<100@x>") + 1
