"""What the readers of an account say they read: peers that say what they accept
(``docs/batching.md``, "Who gets batches").

A C++ ``rmw_email`` node reads one message per email and knows nothing of batches, parts
or compressed bodies, and announces nothing. So a publisher batches, splits or compresses
towards an account only when **every** reader of that account said it reads that encoding;
an account whose readers said nothing (a C++ peer's, or one not heard of yet) gets single,
uncompressed messages, whatever the configuration, and one log line says why.

How readers say it: a sender that would batch, split or compress towards an account it
knows nothing of (or whose records are older than a period) asks it: a **probe** (a
message on the graph topic, ``event: probe``, at most every 10 s per account). Every
emailmw context that receives mail at that account answers with a **reader record**
(``event: reader``: the account it reads, the encodings it reads, its period), sent to
the address the probe names. Only senders that ask get records: a C++ peer, or an emailmw
sender that does not batch, never does. A sender learns the records its own mailbox gets:
through its polling thread when it receives, else by reading the mailbox's history of the
graph topic (every half second while it waits to know, every 10 s otherwise). A record
counts for three periods; the newest of each reader wins. In ``enforce``, only a record
whose signature verifies counts (the same decision as any mail).

:class:`PeerTable` (what the records say, and the decision) is pure and tested without a
transport; :class:`Peers` is one context's: it feeds the table, sends its own records and
probes, and answers ``accept`` (the :class:`~emailmw._transport.base.Readers` contract)
for the senders below it. Thread-safe.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from email.utils import getaddresses
from typing import Final

import yaml

from .._core.config import BatchPolicy
from .._core.log import get_logger
from .._core.protocol import PublishRoute, Recipients, Route, Unroutable, classify, publish_email
from .._core.types import Email, Gid
from .._transport.base import EmailSender, FailureCallback, ReadersBatch, SenderWrapper

__all__ = [
    "FEATURES",
    "GRAPH_TOPIC",
    "PeerSender",
    "PeerTable",
    "Peers",
    "READER_TYPE",
    "ReaderRecord",
    "own_features",
    "read_record",
    "record_body",
]

_log = get_logger("peers")

#: the graph topic (``_graph``): node announcements, and the readers' records
GRAPH_TOPIC: Final = "/_emailmw/graph"
READER_TYPE: Final = "emailmw/msg/ReaderRecord"
#: what a reader may say it reads: batch emails, a message in parts, zstd bodies,
#: encrypted bodies
FEATURES: Final = ("batch", "parts", "zstd", "encryption")
#: how often a sender asks again (seconds): a record counts for one and a half periods,
#: so a reader that went silent (killed) stops counting within a minute
RECORD_PERIOD: Final = 40.0
_EXPIRY_PERIODS: Final = 1.5
#: a probe to one account goes at most this often (seconds)
_PROBE_EVERY: Final = 10.0
#: an answer to a probe goes to one address at most this often (seconds)
_ANSWER_EVERY: Final = 1.0
#: how often a publisher that does not receive reads its mailbox's history for records
#: while it waits to know an account (seconds)
_REFRESH_WAITING: Final = 0.5
_REFRESH_IDLE: Final = 10.0


def own_features(encryption: bool) -> frozenset[str]:
    """What this process reads: batches and parts always, zstd when the zstandard
    package is there, encrypted bodies when ``encryption`` (it has a key to open them)."""
    found = {"batch", "parts"}
    if importlib.util.find_spec("zstandard") is not None:
        found.add("zstd")
    if encryption:
        found.add("encryption")
    return frozenset(found)


@functools.lru_cache(maxsize=1024)
def _address(value: str) -> str:
    """The bare address of ``value``, lower-case ('' for none). Remembered: every message
    a context sends asks it of its recipients, several times (parsing one costs ~10 us)."""
    found = getaddresses([value])
    return found[0][1].strip().lower() if found and found[0][1] else ""


def accounts_of(recipients: Sequence[str]) -> tuple[str, ...]:
    """The accounts ``recipients`` name: bare addresses, lower-case, sorted, once each
    (what :meth:`Peers.accept` and :meth:`Peers.reads` are asked about)."""
    return tuple(sorted({a for r in recipients if r and (a := _address(r))}))


@dataclass(frozen=True, slots=True)
class ReaderRecord:
    """What one reader said (``event`` ``reader``) or a sender asked (``probe``): the
    reader's id, the account it reads (for a probe: the address to answer), the encodings
    it reads, its period (seconds) and when it said it (ns)."""

    event: str
    reader: str
    account: str
    accepts: frozenset[str]
    period: float
    stamp_ns: int


def record_body(
    event: str, reader: str, account: str, accepts: Iterable[str], period: float
) -> str:
    """The YAML body of a reader record or a probe."""
    return str(
        yaml.safe_dump(
            {
                "event": event,
                "reader": reader,
                "account": account,
                "accepts": sorted(accepts),
                "period": period,
            },
            sort_keys=False,
        )
    )


def read_record(email: Email, route: Route) -> ReaderRecord | None:
    """The reader record or probe ``email`` is (None: it is not one, or not readable)."""
    if not isinstance(route, PublishRoute) or route.topic != GRAPH_TOPIC:
        return None
    if email.headers.get("Message-Type") != READER_TYPE:
        return None
    try:
        data = yaml.safe_load(email.body)
        event = str(data["event"])
        accepts = frozenset(str(f) for f in data.get("accepts") or () if str(f) in FEATURES)
        record = ReaderRecord(
            event, str(data["reader"])[:64], _address(str(data["account"])), accepts,
            min(max(float(data.get("period", RECORD_PERIOD)), 1.0), 86400.0),
            route.info.source_timestamp,
        )  # fmt: skip
    except (yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError):
        return None
    if event not in ("reader", "probe", "withdraw") or not record.account:
        return None
    return record


class PeerTable:
    """The readers' records by account: a pure state machine (times are given). A record
    counts for three of its periods; each reader's newest counts. Not thread-safe."""

    def __init__(self) -> None:
        # account -> reader -> record
        self._readers: dict[str, dict[str, ReaderRecord]] = {}

    def add(self, record: ReaderRecord) -> bool:
        """Note ``record``; True when it changed what is known."""
        readers = self._readers.setdefault(record.account, {})
        known = readers.get(record.reader)
        if known is not None and known.stamp_ns >= record.stamp_ns:
            return False
        readers[record.reader] = record
        return known is None or known.accepts != record.accepts

    def withdraw(self, record: ReaderRecord) -> bool:
        """The reader of ``record`` stopped reading its account (it closed); True when it
        was known."""
        readers = self._readers.get(record.account, {})
        known = readers.get(record.reader)
        if known is None or known.stamp_ns > record.stamp_ns:
            return False
        del readers[record.reader]
        return True

    def readers(self, account: str, now_ns: int) -> list[ReaderRecord]:
        """The live records of ``account``'s readers."""
        found = self._readers.get(_address(account), {})
        return [
            r for r in found.values()
            if now_ns - r.stamp_ns <= _EXPIRY_PERIODS * r.period * 1e9
        ]  # fmt: skip

    def missing(
        self, accounts: Iterable[str], feature: str, now_ns: int, *, own: str = ""
    ) -> list[str]:
        """The accounts (bare addresses) of ``accounts`` whose readers did not all say
        they read ``feature``: none known, or one that did not say it. ``own``: the
        asking sender's own reader, never counted (it reads its own account beside readers
        that say nothing, such as a C++ node on one shared inbox)."""
        out = []
        for account in dict.fromkeys(_address(a) for a in accounts if a):
            live = [r for r in self.readers(account, now_ns) if r.reader != own]
            if not live or any(feature not in r.accepts for r in live):
                out.append(account)
        return out

    def stale(self, accounts: Iterable[str], now_ns: int) -> list[str]:
        """The accounts whose newest live record is older than its period (time to ask
        again, before it expires)."""
        out = []
        for account in dict.fromkeys(_address(a) for a in accounts if a):
            live = self.readers(account, now_ns)
            if live and now_ns - max(r.stamp_ns for r in live) > min(r.period for r in live) * 1e9:
                out.append(account)
        return out

    def unknown(self, accounts: Iterable[str], now_ns: int) -> list[str]:
        """The accounts no live reader record is known of."""
        return [a for a in dict.fromkeys(_address(a) for a in accounts if a)
                if not self.readers(a, now_ns)]  # fmt: skip


def _recipients(email: Email) -> list[str]:
    return [*email.to, *email.cc, *email.bcc]


class Peers:
    """One context's knowledge of its peers' readers, and its own reader records.

    ``account``: the address this context reads; ``features``: what it reads;
    ``send``: sends one email (records and probes: memory guarantee, as control mail:
    never batched, ahead of queued data);
    ``history``: the graph topic's newest emails in this context's mailbox (None: no
    store); ``trusts``: whether an email read from history may be believed (``enforce``:
    its signature verifies); ``receiving``: whether this context's polling thread runs
    (records then come through :meth:`observe`)."""

    def __init__(
        self,
        account: str,
        features: frozenset[str],
        *,
        send: Callable[[Email], None],
        history: Callable[[], list[Email]] | None,
        trusts: Callable[[Email], bool],
        receiving: Callable[[], bool],
        period: float = RECORD_PERIOD,
        plain: Iterable[str] = (),
    ) -> None:
        self.account = _address(account) or account
        self.plain = frozenset(_address(a) for a in plain)
        self.features = features
        self.period = period
        self._send = send
        self._history = history
        self._trusts = trusts
        self._receiving = receiving
        self._gid = Gid.new()
        self._seq = 0
        self._table = PeerTable()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._answered: dict[str, float] = {}  # address -> when a probe was last answered
        self._probed: dict[str, float] = {}  # account -> when it was last probed
        self._said: set[tuple[tuple[str, ...], str]] = set()  # decisions logged once
        self._refreshed = 0.0
        self._refreshing = False
        self._closed = False

    # ------------------------------------------------------------------ the reader side

    def _email(self, event: str, to: str, accepts: Iterable[str]) -> Email:
        with self._lock:
            self._seq += 1
            seq = self._seq
        body = record_body(event, str(self._gid.value), self.account, accepts, self.period)
        return publish_email(
            GRAPH_TOPIC, body, recipients=Recipients(self.account, (to,)), gid=self._gid,
            sequence_number=seq, timestamp_ns=time.time_ns(),
            headers={"Message-Type": READER_TYPE},
        )  # fmt: skip

    def _tell(self, event: str, to: str, accepts: Iterable[str]) -> None:
        try:
            self._send(self._email(event, to, accepts))
        except Exception as exc:  # noqa: BLE001 - telling peers must never stop receiving
            _log.debug("sending a reader %s to %s failed: %s", event, to, exc)

    def observe(self, email: Email, route: Route, ticket: object = None) -> None:
        """A polling handler: a reader record is noted, a probe answered (at most once a
        second per address). Never raises."""
        del ticket
        try:
            self._observe(email, route)
        except Exception:  # noqa: BLE001 - a handler must never stop the polling thread
            _log.exception("reading a peer's record failed (a bug in emailmw)")

    def _observe(self, email: Email, route: Route) -> None:
        if isinstance(route, Unroutable):
            return
        record = read_record(email, route)
        if record is None:
            return
        self._note(record)
        if record.event != "probe":
            return
        now = time.monotonic()
        with self._lock:
            due = now - self._answered.get(record.account, -1e9) >= _ANSWER_EVERY
            if due:
                self._answered[record.account] = now
        if due:
            self._tell("reader", record.account, self.features)

    def _note(self, record: ReaderRecord) -> None:
        if record.event == "withdraw":
            with self._changed:
                gone = self._table.withdraw(record)
                self._changed.notify_all()
            if gone:
                _log.info("the reader %s of %s stopped reading it", record.reader,
                          record.account)  # fmt: skip
            return
        if record.event != "reader":
            return
        with self._changed:
            changed = self._table.add(record)
            self._changed.notify_all()
        if changed:
            _log.info("the reader %s of %s reads %s", record.reader, record.account,
                      ", ".join(sorted(record.accepts)) or "single messages only")  # fmt: skip

    # ---------------------------------------------------------------- the sender side

    def accept(self, recipients: Sequence[str], feature: str, *, wait: float = 0.0) -> bool:
        """Whether every reader of every account in ``recipients`` said it reads
        ``feature``. An account not known yet is probed (and its records read); ``wait``:
        how long to wait for it to answer. A "no" is logged once per recipients and
        feature, with why; a later "yes" too."""
        accounts = accounts_of(recipients)
        if not accounts:
            return False
        plain = [a for a in accounts if a in self.plain]
        if plain:  # (named as read by peers that announce nothing: never asked)
            self._say(accounts, feature, plain, named=True)
            return False
        self._ask(accounts)
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                missing = self._table.missing(
                    accounts, feature, time.time_ns(), own=str(self._gid.value)
                )
                closed = self._closed
            left = deadline - time.monotonic()
            if not missing or left <= 0 or closed:
                break
            with self._changed:
                self._changed.wait(min(left, _REFRESH_WAITING))
            self._ask(accounts, waiting=True)
        self._say(accounts, feature, missing)
        return not missing

    def reads(self, accounts: Sequence[str], feature: str) -> bool:
        """Whether every reader of every account of ``accounts`` (bare addresses, as
        :meth:`accept` makes them) said it reads ``feature``, by what is known now: a
        look-up (no probe, no wait, no log; takes only this object's lock), for a sender
        that asks again when the email leaves its queue (:class:`ReadersBatch`)."""
        if not accounts or any(a in self.plain for a in accounts):
            return False
        with self._lock:
            return not self._table.missing(accounts, feature, time.time_ns(),
                                           own=str(self._gid.value))  # fmt: skip

    def refusing(self, recipients: Sequence[str], feature: str) -> list[str]:
        """The accounts of ``recipients`` named in ``plain-readers`` (never asked: their
        readers announce nothing, so they never read ``feature``)."""
        del feature
        return sorted({_address(r) for r in recipients if r and _address(r) in self.plain})

    def _say(
        self, accounts: tuple[str, ...], feature: str, missing: list[str], *, named: bool = False
    ) -> None:
        key = (accounts, feature)
        with self._lock:
            if (key in self._said) == bool(missing):
                return
            if missing:
                self._said.add(key)
            else:
                self._said.discard(key)
        what = {"batch": "batches", "parts": "a message in parts", "zstd": "zstd bodies",
                "encryption": "encrypted bodies"}.get(feature, feature)  # fmt: skip
        if missing and named:
            _log.info("not sending %s to %s: %s is read by plain readers (plain-readers)",
                      what, ", ".join(accounts), ", ".join(missing))  # fmt: skip
        elif missing:
            _log.warning(
                "not sending %s to %s: no reader of %s said it reads them (a C++ "
                "rmw_email peer, or one not heard from yet: it tells this sender once it "
                "gets mail from it; docs/batching.md)",
                what, ", ".join(accounts), ", ".join(missing),
            )  # fmt: skip
        else:
            _log.info("sending %s to %s: every reader said it reads them", what,
                      ", ".join(accounts))  # fmt: skip

    def _ask(self, accounts: Sequence[str], *, waiting: bool = False) -> None:
        """Probe the accounts not known yet, or known by records older than a period (at
        most every 10 s each), and read the mailbox's records (for either) when no polling
        thread does."""
        now = time.monotonic()
        with self._lock:
            unknown = self._table.unknown(accounts, time.time_ns())
            stale = self._table.stale(accounts, time.time_ns())
            probe = [a for a in {*unknown, *stale}
                     if now - self._probed.get(a, -1e9) >= _PROBE_EVERY]  # fmt: skip
            for account in probe:
                self._probed[account] = now
        for account in probe:
            self._tell("probe", account, ())
        if unknown or stale:
            # (stale: the answer to the probe is read before the record expires, so that
            # a sender never falls back to single messages for the moment it takes to
            # read it again: under a provider's budget each would spend an email)
            self._refresh(_REFRESH_WAITING if waiting else _REFRESH_IDLE)

    def _refresh(self, every: float) -> None:
        """Read the records in the mailbox's history (in the background), when this
        context's polling thread does not, at most every ``every`` seconds."""
        if self._history is None or self._receiving():
            return
        now = time.monotonic()
        with self._lock:
            if self._refreshing or now - self._refreshed < every:
                return
            self._refreshing, self._refreshed = True, now
        threading.Thread(target=self._read_history, name="emailmw-peers", daemon=True).start()

    def _read_history(self) -> None:
        try:
            assert self._history is not None
            emails = self._history()
        except Exception as exc:  # noqa: BLE001 - a failed look is tried again later
            _log.debug("reading reader records failed: %s", exc)
            emails = []
        finally:
            with self._lock:
                self._refreshing = False
        now = time.time_ns()
        for email in emails:
            record = read_record(email, classify(email, now))
            if record is not None and self._trusts(email):
                self._note(record)

    def close(self) -> None:
        """Stop; the senders this context told what it reads are told it reads no more
        (a ``withdraw``: they stop batching towards its account at once, for a reader
        that announces nothing may be left there)."""
        with self._changed:
            if self._closed:
                return
            self._closed = True
            told = list(self._answered)
            self._changed.notify_all()
        for address in told:
            self._tell("withdraw", address, ())


class PeerSender(SenderWrapper):
    """The context's sender: batches only towards accounts whose readers all said they
    read batches (:class:`Peers`); the rest as ``inner`` does. Thread-safe as ``inner``."""

    def __init__(self, inner: EmailSender, peers: Peers, default: BatchPolicy) -> None:
        super().__init__(inner)
        self._peers = peers
        self._default = default  # the configured ``batch``

    def __repr__(self) -> str:
        return repr(self._inner)

    def send(
        self,
        email: Email,
        *,
        guarantee: str | None = None,
        on_failure: FailureCallback | None = None,
        batch: BatchPolicy | None = None,
    ) -> None:
        policy = batch if batch is not None else self._default
        if policy.enabled:
            # (asked now, to probe readers not known and say a change once; asked again
            # when the email leaves the outbox, for what is known then: mail queued while
            # the readers' server was down goes batched once they answered)
            recipients = _recipients(email)
            self._peers.accept(recipients, "batch")
            accounts = accounts_of(recipients)
            peers = self._peers
            batch = ReadersBatch(
                policy.linger_ms, policy.max_messages, policy.max_bytes,
                allowed=lambda: peers.reads(accounts, "batch"),
            )  # fmt: skip
        self._inner.send(email, guarantee=guarantee, on_failure=on_failure, batch=batch)

    def close(self) -> None:
        self._peers.close()
        super().close()
