"""Peers that say what they read (``_peers``): the pure table and the decision, without a
mail server (``tests/email/test_batching.py`` and ``test_interop_server.py`` have them over
the real one)."""

from __future__ import annotations

import time
from typing import Any

from emailmw._core.protocol import Recipients, classify, publish_email
from emailmw._core.types import Gid
from emailmw._delivery.peers import PeerTable, ReaderRecord, read_record, record_body
from emailmw._transport.group.model import GroupSettings, Head, plan

NS = 10**9


def _reader(reader: str, account: str, accepts: set[str], at_s: float) -> ReaderRecord:
    return ReaderRecord("reader", reader, account, frozenset(accepts), 60.0, int(at_s * NS))


def test_an_account_batches_only_when_every_reader_said_it_reads_batches() -> None:
    table = PeerTable()
    assert table.missing(["bob@x"], "batch", 0) == ["bob@x"]  # nobody said anything: a C++ peer
    table.add(_reader("1", "bob@x", {"batch", "parts"}, 10))
    assert table.missing(["Bob <BOB@x>"], "batch", 20 * NS) == []
    assert table.missing(["bob@x"], "zstd", 20 * NS) == ["bob@x"]
    table.add(_reader("2", "bob@x", {"parts"}, 11))  # a second reader that does not batch
    assert table.missing(["bob@x"], "batch", 20 * NS) == ["bob@x"]
    assert table.missing(["bob@x", "carol@x"], "parts", 20 * NS) == ["carol@x"]


def test_a_record_stands_for_one_and_a_half_periods_and_is_asked_again_after_one() -> None:
    # (a minute for the 40-s period: a reader killed stops counting within it; was three
    # periods of 60 s, and 736 of 1,024 messages went in batches a C++ reader lost)
    table = PeerTable()
    table.add(_reader("1", "bob@x", {"batch"}, 0))
    assert table.stale(["bob@x"], 30 * NS) == []
    assert table.stale(["bob@x"], 61 * NS) == ["bob@x"]  # older than a period: ask again
    assert table.missing(["bob@x"], "batch", 89 * NS) == []
    assert table.missing(["bob@x"], "batch", 91 * NS) == ["bob@x"]  # expired
    # a reader's newest record wins; an older one changes nothing
    table.add(_reader("1", "bob@x", {"parts"}, 200))
    assert not table.add(_reader("1", "bob@x", {"batch"}, 150))
    assert table.missing(["bob@x"], "batch", 201 * NS) == ["bob@x"]


def test_a_sender_never_counts_its_own_record_and_a_withdrawn_reader_is_gone() -> None:
    # (#58: a node reading the account it publishes to, beside a C++ node on that one
    # inbox, answered its own probe and batched: the C++ node got 1, 2 and 0 of 20)
    table = PeerTable()
    table.add(_reader("me", "shared@x", {"batch"}, 0))
    assert table.missing(["shared@x"], "batch", NS, own="me") == ["shared@x"]
    table.add(_reader("other", "shared@x", {"batch"}, 0))
    assert table.missing(["shared@x"], "batch", NS, own="me") == []
    # a reader that closes withdraws its record: no batches to its account from then
    gone = ReaderRecord("withdraw", "other", "shared@x", frozenset(), 60.0, 2 * NS)
    assert table.withdraw(gone)
    assert table.missing(["shared@x"], "batch", 3 * NS, own="me") == ["shared@x"]
    assert not table.withdraw(gone)


def test_an_account_named_as_read_by_plain_readers_gets_single_messages() -> None:
    from emailmw._delivery.peers import Peers

    sent: list[Any] = []
    peers = Peers("alice@x", frozenset({"batch"}), send=sent.append, history=None,
                  trusts=lambda email: True, receiving=lambda: True,
                  plain=["Cpp <CPP@x>"])  # fmt: skip
    peers._note(ReaderRecord("reader", "7", "cpp@x", frozenset({"batch"}), 60.0,
                             time.time_ns()))  # fmt: skip
    assert not peers.accept(["cpp@x"], "batch")  # (its emailmw reader's record aside)
    assert sent == []  # never asked: nothing it says would change it
    peers.close()


def test_a_record_reads_back_and_other_graph_mail_is_none() -> None:
    body = record_body("reader", "7", "Bob <bob@x>", ["zstd", "batch", "bogus"], 30.0)
    email = publish_email(
        "/_emailmw/graph", body, recipients=Recipients("bob@x", ("alice@x",)), gid=Gid(7),
        sequence_number=0, timestamp_ns=5 * NS,
        headers={"Message-Type": "emailmw/msg/ReaderRecord"},
    )  # fmt: skip
    record = read_record(email, classify(email, 0))
    assert record == ReaderRecord("reader", "7", "bob@x", frozenset({"zstd", "batch"}), 30.0,
                                  5 * NS)  # fmt: skip
    node = email.replace(body="node: /talker\n", headers={"Message-Type": "emailmw/msg/Node"})
    assert read_record(node, classify(node, 0)) is None


def test_every_part_of_a_message_goes_to_one_member_and_is_never_stolen() -> None:
    """A stateless group shares single messages by UID, the parts of one message by the
    message (one member joins them), and a message offered again goes to the next member."""
    alive = ["m0", "m1", "m2"]
    heads = {
        uid: Head("/t", part_of="<big@x>" if uid < 13 else "", size=1) for uid in range(10, 16)
    }
    keys = {uid: head.share_key(uid) for uid, head in heads.items()}
    parts = frozenset(uid for uid, head in heads.items() if head.part_of)
    waiting = [(uid, 10.0) for uid in sorted(heads)]  # (waited long: others may steal)
    settings = GroupSettings(prefetch=100)
    claimed = {m: plan("stateless", m, alive, {}, waiting, 0, settings, None, None, keys, parts)
               for m in alive}  # fmt: skip
    owners = {m for m, work in claimed.items() if set(work.claim) & parts}
    assert len(owners) == 1  # one member claims every part
    assert all(set(work.claim) & parts in (set(), set(parts)) for work in claimed.values())
    again = Head("/t", delivered=1).share_key(20)
    assert again != Head("/t").share_key(20)  # offered again: another member's share


def test_a_part_taken_over_goes_where_the_rest_of_its_message_goes() -> None:
    """A member died holding part 1 of a message whose parts 2 and 3 wait in the inbox:
    whoever takes part 1 over is the member that claims parts 2 and 3 (was: part 1 by its
    UID's share, the others by the message's: a message split across members, never
    joined)."""
    from emailmw._transport.group.model import owner, part_key

    key = part_key("<big@x>")
    for alive in (["m0", "m1"], ["m0", "m1", "m2"]):
        for me in alive:
            work = plan("stateless", me, alive, {"dead": [5]}, [(12, 10.0), (13, 10.0)], 0,
                        GroupSettings(prefetch=100), None, None, {12: key, 13: key},
                        frozenset({12, 13}), {"dead": {5: key}})  # fmt: skip
            mine = me == owner(key, alive)
            assert (5 in work.take.get("dead", [])) is mine
            assert (set(work.claim) == {12, 13}) is mine


def test_a_stale_record_is_read_again_before_it_expires_and_batching_never_stops() -> None:
    """A sender without a polling thread whose reader's record grew older than a period:
    the mailbox is read again then (in the background), so the reader's answer to the
    probe renews it before it expires (it was read only once the record had expired: the
    sender sent single messages meanwhile, each an email of a provider's budget)."""
    import threading
    import time

    from emailmw._delivery.peers import GRAPH_TOPIC, READER_TYPE, Peers

    period = 1.0  # (stale after one period, expired after one and a half: 1.5 s)
    reads = threading.Event()

    def history() -> list[Any]:
        reads.set()
        body = record_body("reader", "7", "bob@x", ["batch"], period)
        email = publish_email(
            GRAPH_TOPIC, body, recipients=Recipients("bob@x", ("alice@x",)), gid=Gid(7),
            sequence_number=1, timestamp_ns=time.time_ns(),
            headers={"Message-Type": READER_TYPE},
        )  # fmt: skip
        return [email]

    peers = Peers("alice@x", frozenset({"batch"}), send=lambda email: None, history=history,
                  trusts=lambda email: True, receiving=lambda: False, period=period)  # fmt: skip
    start = time.monotonic()
    peers._note(ReaderRecord("reader", "7", "bob@x", frozenset({"batch"}), period,
                             time.time_ns()))  # fmt: skip
    assert peers.accept(["bob@x"], "batch")
    time.sleep(1.2)  # stale, not expired
    assert peers.accept(["bob@x"], "batch")
    assert reads.wait(5), "the mailbox was not read again while the record was stale"
    # past the first record's expiry (the second, read at 1.2 s or later, lives to 2.7 s)
    time.sleep(max(0.0, start + 1.6 - time.monotonic()))
    assert peers.accept(["bob@x"], "batch")
    peers.close()
