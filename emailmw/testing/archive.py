"""Synthetic mail archives with known traffic, for the pipeline's tests and benchmark.

:func:`generate` builds emails with emailmw's own wire format (publishes, requests and
responses with real metadata headers, plus foreign and malformed mail), delivers them into
mailboxes with a delivery time each, and injects known faults: lost messages (sequence
gaps), duplicated deliveries, reordered deliveries, unanswered requests and duplicate
responses. :class:`Archive` writes the result as Maildirs or as an mbox and carries the
exact answers the pipeline must find (:attr:`Archive.expected`).
"""

from __future__ import annotations

import email.utils
import math
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.protocol import Recipients, publish_email, request_email, response_email
from .._core.types import Email, Gid
from .._core.wire import build, format_date

__all__ = ["Archive", "Stored", "generate", "linear_percentile"]

T0 = 1_795_000_000 * 1_000_000_000  # 2026-11-18, whole second


def linear_percentile(values: list[float], q: float) -> float:
    """Percentile with linear interpolation between closest ranks (Spark's ``percentile``)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Stored:
    """One email as stored in a mailbox."""

    mailbox: str
    raw: bytes
    delivered_ns: int


@dataclass
class Archive:
    stored: list[Stored]
    expected: dict[str, Any] = field(default_factory=dict)

    def write_maildir(self, root: Path) -> Path:
        """One Maildir per mailbox under ``root/<mailbox>/Maildir``, Dovecot-style names."""
        counters: dict[str, int] = defaultdict(int)
        for item in self.stored:
            cur = root / item.mailbox / "Maildir" / "cur"
            if counters[item.mailbox] == 0:
                for sub in ("cur", "new", "tmp"):
                    (root / item.mailbox / "Maildir" / sub).mkdir(parents=True, exist_ok=True)
            counters[item.mailbox] += 1
            secs, nanos = divmod(item.delivered_ns, 1_000_000_000)
            name = (
                f"{secs}.M{nanos // 1000:06d}P{counters[item.mailbox]:08d}.mail,"
                f"S={len(item.raw)}:2,"
            )
            (cur / name).write_bytes(item.raw.replace(b"\r\n", b"\n"))
        return root

    def write_mbox(self, path: Path) -> Path:
        """All mailboxes in one mbox (mboxrd: body lines starting with ``From `` quoted)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            for item in self.stored:
                when = email.utils.formatdate(item.delivered_ns / 1e9, usegmt=True)
                out.write(f"From emailmw@example.test {when}\n".encode())
                for line in item.raw.replace(b"\r\n", b"\n").split(b"\n"):
                    stripped = line.lstrip(b">")
                    out.write((b">" + line if stripped.startswith(b"From ") else line) + b"\n")
        return path


def _received(delivered_ns: int, mailbox: str) -> str:
    return (
        f"from mail.example.test by mail.example.test with LMTP for "
        f"<{mailbox}@example.test>; {format_date(delivered_ns).replace('GMT', '+0000')}"
    )


def _store(mailbox: str, message: Email, delivered_ns: int) -> Stored:
    headers = {"Received": _received(delivered_ns, mailbox)} | dict(message.headers)
    return Stored(mailbox, build(message.replace(bcc=(), headers=headers)), delivered_ns)


def generate(
    *,
    topics: int = 3,
    publishers_per_topic: int = 2,
    messages_per_publisher: int = 50,
    rate_hz: float = 10.0,
    services: int = 1,
    requests_per_service: int = 20,
    lost: int = 5,
    duplicated: int = 3,
    reordered: int = 3,
    unanswered: int = 2,
    duplicate_responses: int = 1,
    foreign: int = 4,
    malformed: int = 3,
    subsecond: bool = True,
    skewed: int = 0,
    seed: int = 7,
) -> Archive:
    """An archive with known faults; ``subsecond=False`` keeps delivery times on whole
    seconds (what Received headers and mbox can carry), so Maildir and mbox agree exactly;
    the publishers of the first ``skewed`` topics have clocks 150 ms ahead of the server's
    (their latencies -149 to +50 ms)."""
    rng = random.Random(seed)
    recipients = Recipients("robot@example.test", ("listener@example.test",))
    period = int(1e9 / rate_hz)
    deliveries: list[tuple[str, Email, int, tuple[Any, ...]]] = []  # mailbox, email, time, tag
    streams: list[tuple[int, str]] = []
    for t in range(topics):
        topic = f"/sensors/t{t}"
        for _ in range(publishers_per_topic):
            gid = Gid.new()
            streams.append((gid.value, topic))
            for seq in range(messages_per_publisher):
                # microseconds: what a Maildir file name can carry
                source = T0 + seq * period + rng.randrange(period // 1000) * 1000
                latency = (1 + (seq * 37 + t * 11) % 200) * 1_000_000  # 1..200 ms, known
                delivered = source + latency
                message = publish_email(
                    topic,
                    f"data: {seq}",
                    recipients=recipients,
                    gid=gid,
                    sequence_number=seq,
                    timestamp_ns=source + (150_000_000 if t < skewed else 0),
                )
                message = message.with_message_id(f"<{gid.value}.{seq}@example.test>")
                deliveries.append(("listener", message, delivered, ("pub", gid.value, topic, seq)))

    # faults on publishes: pick distinct victims (never the last of a stream: a trailing
    # loss is invisible to any receiver, so the answers would be ambiguous)
    pubs = [i for i, d in enumerate(deliveries) if d[3][3] < messages_per_publisher - 1]
    victims = rng.sample(pubs, lost + duplicated + reordered)
    lost_ix = set(victims[:lost])
    dup_ix = victims[lost : lost + duplicated]
    reorder_ix = victims[lost + duplicated :]

    def when(delivered: int) -> int:
        """Whole seconds (rounded up) unless sub-second delivery times are wanted."""
        return delivered if subsecond else -(-delivered // 1_000_000_000) * 1_000_000_000

    stored: list[tuple[str, Email, int, tuple[Any, ...]]] = []
    for i, item in enumerate(deliveries):
        if i in lost_ix:
            continue
        mailbox, message, delivered, tag = item
        if i in reorder_ix:
            delivered += 3 * period  # arrives after later messages of its stream
        stored.append((mailbox, message, when(delivered), tag))
        if i in dup_ix:
            stored.append((mailbox, message, when(delivered + (period // 3000) * 1000), tag))

    calls: list[dict[str, Any]] = []
    client = Gid.new()
    for s in range(services):
        service = f"/add_two_ints_{s}"
        for seq in range(requests_per_service):
            sent = T0 + seq * period * 2 + s * 1_000_000
            request = request_email(
                service,
                f"a: {seq}\nb: 1",
                recipients=recipients,
                client_gid=client,
                sequence_number=seq,
                timestamp_ns=sent,
            )
            request = request.with_message_id(f"<req.{s}.{seq}@example.test>")
            request_delivered = when(sent + 20_000_000)
            rtt = (30 + (seq * 13) % 90) * 1_000_000
            stored.append(("server", request, request_delivered, ("req",)))
            call: dict[str, Any] = {
                "service": service,
                "message_id": request.message_id,
                "responses": 0,
                "rtt_ms": None,
            }
            if seq >= unanswered:
                response = response_email(
                    request,
                    str(seq + 1),
                    from_="server@example.test",
                    timestamp_ns=request_delivered + 1_000_000,
                )
                response_delivered = when(sent + rtt)
                copies = 2 if seq - unanswered < duplicate_responses else 1
                for copy in range(copies):
                    stored.append(
                        (
                            "robot",
                            response.with_message_id(f"<resp.{s}.{seq}.{copy}@example.test>"),
                            response_delivered + copy * 1_000_000_000,
                            ("resp",),
                        )
                    )
                call |= {"responses": copies, "rtt_ms": (response_delivered - sent) / 1e6}
            calls.append(call)

    extras: list[Stored] = []
    foreign_mail = [
        b"From: person@example.test\r\nSubject: lunch?\r\n\r\nsee you at noon\r\n",
        b"From: person@example.test\r\nSubject: news\r\nContent-Type: text/html\r\n\r\n"
        b"<p>x</p>\r\n",
        b"From: MAILER-DAEMON@example.test\r\nSubject: Undelivered Mail\r\nContent-Type: "
        b"multipart/report; boundary=b\r\n\r\n--b\r\n\r\nbounce\r\n--b--\r\n",
    ]
    malformed_mail = [
        b"From: x@example.test\r\nSubject: /sensors/t0\r\nPublisher-GID: seven\r\n"
        b"Source-Timestamp: 1\r\n\r\nbroken gid\r\n",
        b"From: x@example.test\r\nSubject: /sensors/t0\r\nPublisher-GID: 1\r\n\r\nno timestamp\r\n",
        b"Subject: =?utf-8?q?evil=0D=0ABcc=3A_x?=\r\nPublisher-GID: 1\r\n\r\ninjection\r\n",
    ]
    for i in range(foreign):
        raw = foreign_mail[i % len(foreign_mail)]
        extras.append(Stored("listener", _with_received(raw, T0 + i * 1_000_000_000), T0))
    for i in range(malformed):
        raw = malformed_mail[i % len(malformed_mail)]
        extras.append(Stored("listener", _with_received(raw, T0 + i * 1_000_000_000), T0))

    stored.sort(key=lambda d: d[2])
    archive = Archive([_store(m, e, t) for m, e, t, _ in stored] + extras)
    archive.expected = _expected(stored, streams, calls, foreign, malformed)
    return archive


def _with_received(raw: bytes, delivered_ns: int) -> bytes:
    return f"Received: {_received(delivered_ns, 'listener')}\r\n".encode() + raw


def _expected(
    stored: list[tuple[str, Email, int, tuple[Any, ...]]],
    streams: list[tuple[int, str]],
    calls: list[dict[str, Any]],
    foreign: int,
    malformed: int,
) -> dict[str, Any]:
    health: dict[tuple[int, str], dict[str, int]] = {}
    by_stream: dict[tuple[int, str], list[int]] = defaultdict(list)
    latencies: dict[str, list[float]] = defaultdict(list)
    for _, message, delivered, tag in sorted(stored, key=lambda d: d[2]):
        if tag[0] != "pub":
            continue
        by_stream[(tag[1], tag[2])].append(tag[3])
        source = int(message.headers["Source-Timestamp"])
        latencies[tag[2]].append((delivered - source) / 1e6)
    for key in streams:
        seqs = by_stream[key]
        late, high = 0, -1
        for seq in seqs:
            late += seq < high
            high = max(high, seq)
        health[key] = {
            "sent": max(seqs) + 1,
            "received": len(set(seqs)),
            "lost": max(seqs) + 1 - len(set(seqs)),
            "duplicated": len(seqs) - len(set(seqs)),
            "out_of_order": late,
        }
    topics: dict[str, dict[str, Any]] = {
        topic: {
            "messages": len(values),
            **{
                f"latency_p{int(q * 100)}_ms": linear_percentile(values, q)
                for q in (0.5, 0.9, 0.99)
            },
            "latency_max_ms": max(values),
            "latency_cdf_ms": [linear_percentile(values, i / 100) for i in range(1, 101)],
        }
        for topic, values in latencies.items()
    }
    return {
        "publisher_health": health,
        "topics": topics,
        "calls": calls,
        "foreign": foreign,
        "malformed": malformed,
    }


def iter_bulk(
    count: int,
    *,
    topics: int = 10,
    publishers: int = 20,
    seed: int = 1,
) -> Iterator[tuple[bytes, int]]:
    """Many small publishes quickly, for the benchmark: ``(raw, delivered_ns)``."""
    rng = random.Random(seed)
    recipients = Recipients("robot@example.test", ("listener@example.test",))
    gids = [Gid.new() for _ in range(publishers)]
    seqs = [0] * publishers
    for i in range(count):
        p = i % publishers
        source = T0 + i * 1_000_000
        delivered = source + rng.randrange(1, 200) * 1_000_000
        message = publish_email(
            f"/bench/t{p % topics}",
            f"data: {i}",
            recipients=recipients,
            gid=gids[p],
            sequence_number=seqs[p],
            timestamp_ns=source,
        )
        seqs[p] += 1
        yield (
            _store("listener", message.with_message_id(f"<{i}@bench.example.test>"), delivered).raw,
            delivered,
        )
