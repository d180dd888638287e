"""The matrix: features turned on together, as a user who wants both speed and reliability
would, over the real server, each combination asserting what ``docs/reliability.md``
promises for its class: nothing lost, no repeat unflagged, poison quarantined (never
deleted), memory bounded.

Factors: transport {native, curl}; batching {off, on}; size {small, split, split+zstd};
security {off, enforce, enforce+encryption}; delivery {plain, stateful group, stateless
group}; on-receive {keep, seen, delete, move}; state file {no, yes}; fault {none, SIGKILL
receiver, SIGKILL publisher with spool, poison, callback raises}; path {direct, through a
gateway between two mail servers}; login {password, OAuth2 (XOAUTH2, a token-command)}.
``make test`` runs every valid pair of values (:func:`covering`, a greedy covering array:
``tests/test_matrix_rows.py`` checks it covers every valid pair and triple) and the fixed
rows (:data:`FIXED`), each its own processes; ``EMAILMW_MATRIX=full`` every valid triple. A
delivery group reads with ``on-receive: keep`` (it moves what it processed itself):
combinations that pair a group with another action are not made. The gateway path carries
floctrl messages (a routed face: what gateways relay), encrypted nowhere (encryption names
ROS topics) and uncompressed (floctrl has no compression).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import ssl
import time
from pathlib import Path
from typing import Any

import imapclient
import pytest

import emailmw
from emailmw import Keystore
from emailmw._core.carried import unpack
from emailmw._core.packing import build_batch
from emailmw._core.protocol import Recipients, publish_email
from emailmw._core.wire import build
from emailmw.testing.mailserver import MailServer

from ..helpers import deadline_loop
from .helpers import Peer, inject, transport_extra, unflagged_repeats

FACTORS: dict[str, list[str]] = {
    "transport": ["native", "curl"],
    "batching": ["off", "on"],
    "size": ["small", "split", "split+zstd"],
    "security": ["off", "enforce", "enforce+encryption"],
    "delivery": ["plain", "stateful", "stateless"],
    "on_receive": ["keep", "seen", "delete", "move"],
    "state_file": ["no", "yes"],
    "fault": ["none", "kill-receiver", "kill-publisher", "poison", "callback-raises"],
    "path": ["direct", "gateway"],
    "auth": ["password", "oauth2"],
}
COUNT = 24  # messages a combination publishes
BODY = {"small": 0, "split": 300_000, "split+zstd": 300_000}  # (three parts of 256 KiB)
MAX_RSS_MB = 400  # a subscriber's peak resident memory, whatever the combination


#: combinations run whatever the strength, before the generated ones: one that lost mail
#: in a full run (#57: six legitimate messages quarantined, one left in a claims folder,
#: five in the gateway's INBOX)
FIXED: list[dict[str, str]] = [
    {"transport": "native", "batching": "on", "size": "split+zstd",
     "security": "enforce+encryption", "delivery": "stateful", "on_receive": "keep",
     "state_file": "yes", "fault": "poison", "path": "gateway", "auth": "oauth2"},
]  # fmt: skip


def valid(chosen: dict[str, str]) -> bool:
    """Whether the values ``chosen`` (of some factors) can be in one combination: a
    delivery group reads with ``on-receive: keep``."""
    group = chosen.get("delivery") in ("stateful", "stateless")
    return not (group and chosen.get("on_receive", "keep") != "keep")


def needed(strength: int) -> set[tuple[tuple[str, str], ...]]:
    """Every valid choice of values of ``strength`` factors: what the rows must cover."""
    found = set()
    for names in itertools.combinations(FACTORS, strength):
        for values in itertools.product(*(FACTORS[name] for name in names)):
            chosen = dict(zip(names, values, strict=True))
            if valid(chosen):
                found.add(tuple(chosen.items()))
    return found


def covering(strength: int, fixed: list[dict[str, str]] = FIXED) -> list[dict[str, str]]:
    """Rows (``fixed`` first) that cover every valid choice of values of ``strength``
    factors (:func:`needed`), each row valid: a greedy covering array, the same every run
    (allpairspy, given the constraint as a filter, dropped 42 of the 342 valid pairs).
    Pairs: 26 rows, where the constraint asks 25 at least (each fault with each group mode,
    which reads with ``keep``: 10 rows; plain delivery's 15 faults with the other actions)."""
    left = needed(strength) - {t for row in fixed for t in _tuples(row, strength)}
    rows = [dict(row) for row in fixed]
    while left:
        row = dict(min(left))  # (the first uncovered: every row covers something new)
        for name, values in FACTORS.items():
            if name in row:
                continue
            scores = [(_gain(row, name, value, left), -n, value)
                      for n, value in enumerate(values) if valid({**row, name: value})]  # fmt: skip
            row[name] = max(scores)[2]
        rows.append({name: row[name] for name in FACTORS})
        left -= set(_tuples(row, strength))
    return rows


def _tuples(row: dict[str, str], strength: int) -> list[tuple[tuple[str, str], ...]]:
    return [tuple((name, row[name]) for name in names)
            for names in itertools.combinations(FACTORS, strength)]  # fmt: skip


def _gain(row: dict[str, str], name: str, value: str, left: set[Any]) -> int:
    """How many uncovered choices ``name=value`` completes with what ``row`` holds."""
    chosen = {**row, name: value}
    count = 0
    for wanted in left:
        names = [n for n, _ in wanted]
        if name in names and all(n in chosen and chosen[n] == v for n, v in wanted):
            count += 1
    return count


def combinations() -> list[dict[str, str]]:
    """Every valid pair of values (``EMAILMW_MATRIX=full``: every triple), and
    :data:`FIXED`."""
    return covering(3 if os.environ.get("EMAILMW_MATRIX", "") == "full" else 2)


def _id(combo: dict[str, str]) -> str:
    return "-".join(combo.values())


class World:
    """The accounts, keys and configurations of one combination."""

    def __init__(self, combo: dict[str, str], a: MailServer, b: MailServer, tmp: Path) -> None:
        self.combo, self.tmp = combo, tmp
        self.gateway_path = combo["path"] == "gateway"
        self.group = combo["delivery"] != "plain"
        self.a = a
        self.b = b if self.gateway_path else a  # the subscribers' server
        self.pub_account = a.fresh_account()
        self.sub_account = self.b.fresh_account()
        self.gw = (a.fresh_account(), b.fresh_account()) if self.gateway_path else None
        self.keystore: Keystore | None = None
        if combo["security"] != "off":
            self.keystore = Keystore.create(tmp / "keystore")
            for name in ("talker", "listener", "gateway"):
                self.keystore.create_key(name)

    def security(self, identity: str) -> dict[str, Any]:
        if self.keystore is None:
            return {}
        found: dict[str, Any] = {
            "keystore": str(self.keystore.path), "identity": identity, "verify": "enforce",
        }  # fmt: skip
        if self.combo["security"] == "enforce+encryption" and not self.gateway_path:
            found["encrypt"] = {"/matrix": ["listener"]}
        return {"security": found}

    def transport(self) -> dict[str, Any]:
        """How every account of the combination connects and logs in."""
        transport = self.combo["transport"]
        return {"transport": transport, "auth": self.combo["auth"], **transport_extra(transport)}

    def sub_config(self, name: str) -> dict[str, Any]:
        on_receive = self.combo["on_receive"]
        extra: dict[str, Any] = {
            "quarantine": "Quarantine",
            "on-receive": "move:Archive" if on_receive == "move" else on_receive,
            "max-message-size": "4 MiB",
        }
        if self.combo["state_file"] == "yes":
            extra["state-file"] = str(self.tmp / f"{name}.state")
        if self.gateway_path:
            assert self.gw is not None
            extra["routing"] = {"hub": "bsub", "routes": {"a": self.gw[1]}}
        return self.b.config(self.sub_account, **self.transport(), **extra,
                             **self.security("listener"))  # fmt: skip

    def pub_config(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"max-message-size": "4 MiB"}
        if self.combo["batching"] == "on":
            extra["batch"] = {"linger-ms": 50, "max-messages": 50}
        if self.combo["size"] != "small":
            extra["max-email-bytes"] = 262144  # (the least it may be)
        if self.combo["fault"] == "kill-publisher":
            extra["spool"] = str(self.tmp / "spool")
        if self.gateway_path:
            assert self.gw is not None
            extra["routing"] = {"hub": "a", "routes": {"bsub": self.gw[0]}}
            to = self.gw[0]
        else:
            to = self.sub_account
        return self.a.config(self.pub_account, to=to, **self.transport(), **extra,
                             **self.security("talker"))  # fmt: skip

    def spec(self, role: str, **more: Any) -> Path:
        combo = self.combo
        spec: dict[str, Any] = {"path": combo["path"], "count": COUNT, "size": BODY[combo["size"]]}
        if role == "pub":
            spec["config"] = {"email": self.pub_config()}
            spec["compress"] = combo["size"] == "split+zstd" and not self.gateway_path
            spec["guarantee"] = "spool" if combo["fault"] == "kill-publisher" else "memory"
            spec["wait_for"] = ["batch"] if combo["batching"] == "on" else []
            if spec["compress"]:
                spec["wait_for"].append("zstd")
        else:
            spec["config"] = {"email": self.sub_config(more["name"])}
            if self.group:
                spec["mode"], spec["group"] = combo["delivery"], "crew"
            if combo["fault"] == "callback-raises":
                spec["raise_every"] = 5
        path = self.tmp / f"{role}-{more.get('name', '')}.json"
        path.write_text(json.dumps(spec))
        path.chmod(0o600)
        return path

    def gateway(self) -> emailmw.Gateway:
        assert self.gw is not None
        accounts = {
            side: emailmw.Context({"email": server.config(
                address, routing={"hub": f"gw{side}"}, **self.transport(),
                **self.security("gateway"))})
            for side, server, address in (("a", self.a, self.gw[0]), ("b", self.b, self.gw[1]))
        }  # fmt: skip
        routes = {"bsub": (self.sub_account, "b"), "a": (self.pub_account, "a")}
        return emailmw.Gateway(accounts, routes)


def _lines(peer: Peer, key: str = "i") -> list[dict[str, Any]]:
    return [x for x in map(json.loads, peer.lines.items[1:]) if key in x and "done" not in x]


def _inject_poison(world: World) -> int:
    """Poison for the subscribers' account (from an account holder, unsigned); how many
    emails: a message whose YAML is cut, and (batching on) a batch email carrying one of
    another type; on the gateway path a floctrl email whose payload is not JSON."""
    to = world.sub_account
    if world.gateway_path:
        head = (
            f"From: alice@example.test\r\nTo: {to}\r\nSubject: floctrl work\r\n"
            f"Message-ID: <poison{time.time_ns()}@example.test>\r\nSource-Timestamp: 1\r\n"
            "Route-To: bsub:/A/sub:\r\nRoute-From: a:/A:\r\nRoute-Orig: a:/A:\r\n"
            "Route-Hops: 1\r\nRoute-Face: floctrl\r\n\r\n{not json\r\n"
        )
        inject(world.b, to, head.encode())
        return 1
    recipients = Recipients(to, (to,))

    def typed(data: str, kind: str) -> bytes:
        email = publish_email("/matrix", data, recipients=recipients, gid=emailmw.Gid(99),
                              sequence_number=0, timestamp_ns=time.time_ns(),
                              headers={"Message-Type": kind})  # fmt: skip
        return build(email.with_message_id(f"<p{time.time_ns()}@example.test>"))

    inject(world.b, to, typed("data: 'cut\n", "std_msgs/msg/String"))
    if world.combo["batching"] != "on":
        return 1
    batch = build_batch([typed("x: 1.5\n", "geometry_msgs/msg/Point")], from_=to, to=[to],
                        message_id=f"<pb{time.time_ns()}@example.test>",
                        timestamp_ns=time.time_ns(), subjects=["/matrix"])  # fmt: skip
    inject(world.b, to, batch)
    return 2


def _stored(server: MailServer, address: str) -> set[int]:
    """The indexes of the matrix's messages still stored anywhere in ``address``'s
    account (its INBOX, its quarantine, its group folders, ...)."""
    return set(_where(server, address))


def _where(server: MailServer, address: str) -> dict[int, list[str]]:
    """Each matrix message stored in ``address``'s account: the folders it is in (a part
    counts for its message: the first part carries the index)."""
    found: dict[int, list[str]] = {}
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with imapclient.IMAPClient(server.host, port=server.imaps_port, ssl_context=context) as c:
        c.login(address, server.password)
        for _, _, folder in c.list_folders():
            if folder.endswith("-lock"):
                continue
            try:
                c.select_folder(folder, readonly=True)
                fetched = c.fetch(c.search("ALL"), ["BODY.PEEK[]"])
            except imapclient.exceptions.IMAPClientError:
                continue  # (a group folder removed meanwhile)
            for item in fetched.values():
                raw = item.get(b"BODY[]")
                if raw is None:
                    continue  # an unsolicited FETCH of flags another session changed
                for carried in unpack(raw, max_size=1 << 30):
                    email = carried.email
                    if email is None:
                        continue
                    index = email.headers.get("Matrix-Index")
                    if index is not None and index.isdigit():
                        found.setdefault(int(index), []).append(folder)
                    stamp = re.match(r'\{"timestamp": (\d+)', email.body)
                    if stamp is not None:
                        found.setdefault(int(stamp.group(1)), []).append(folder)
    return found


def _quarantined(server: MailServer, address: str) -> int:
    from .helpers import folder_subjects

    return len(folder_subjects(server, address, "Quarantine"))


@pytest.fixture
def world(request: pytest.FixtureRequest, mailserver: MailServer, tmp_path: Path) -> World:
    combo = request.param
    second = request.getfixturevalue("second_mailserver") if combo["path"] == "gateway" else None
    return World(combo, mailserver, second or mailserver, tmp_path)


@pytest.mark.parametrize("world", combinations(), ids=_id, indirect=True)
def test_a_combination_loses_nothing(world: World, peers: list[Peer]) -> None:
    combo = world.combo
    fault = combo["fault"]
    gateway = world.gateway() if world.gateway_path else None
    try:
        if gateway is not None:
            gateway.start()
        _run(world, peers, fault)
    finally:
        if gateway is not None:
            gateway.close()


def _run(world: World, peers: list[Peer], fault: str) -> None:
    combo = world.combo
    members = 2 if world.group else 1
    subs: list[Peer] = []
    specs = [world.spec("sub", name=f"s{k}") for k in range(members)]

    # (peers wait for their own "ready" line, and a peer that dies is said at once: the
    # deadline is for one that hangs, so a busy machine's start-ups always fit in it)
    def start_sub(spec: Path) -> Peer:
        peer = Peer("sub", spec, "", module="tests.email.matrix_peer")
        peers.append(peer)
        subs.append(peer)
        peer.wait_ready(300)
        return peer

    for spec in specs:
        start_sub(spec)
    pub_spec = world.spec("pub")
    pub = Peer("pub", pub_spec, "", module="tests.email.matrix_peer")
    peers.append(pub)
    pub.wait_ready(300)
    poison = _inject_poison(world) if fault == "poison" else 0

    def processed() -> list[dict[str, Any]]:
        return [line for peer in subs for line in _lines(peer)]

    if fault == "kill-publisher":
        assert pub.lines.wait_for(lambda x: len(x) - 1 >= COUNT // 2, 90), "publisher stuck"
        pub.kill()
        last = max(x["i"] for x in _lines(pub))
        # from the first whose publish() it did not see return: that one may have been
        # published (spooled) already; published again it is a second message (run 1)
        again = Peer("pub", pub_spec, "", "--from", str(last + 1), "--run", "1",
                     module="tests.email.matrix_peer")  # fmt: skip
        peers.append(again)
        again.wait_ready(300)
    if fault == "kill-receiver":
        more = deadline_loop(90)
        while more() and len({x["i"] for x in processed()}) < COUNT // 3:
            time.sleep(0.05)
        victim = subs[0]
        victim.kill()
        start_sub(specs[0])
    raised = {x["raised"] for peer in subs for x in _lines(peer, "raised")}
    weak = not world.group and combo["state_file"] == "no" and fault == "kill-receiver"
    # what the subscribers must process: all of it, but (plain delivery) what a callback
    # raised on (left on the server) and (no state file) what a killed one held
    expected = set(range(COUNT))
    last_count, stable_since = -1, time.monotonic()
    more = deadline_loop(150)
    while more():
        raised = {x["raised"] for peer in subs for x in _lines(peer, "raised")}
        done = {x["i"] for x in processed()}
        left = expected - done - (raised if not world.group else set())
        if not left:
            break
        count = len(processed())
        if count != last_count:
            last_count, stable_since = count, time.monotonic()
        elif weak and time.monotonic() - stable_since > 8:
            break  # (nothing more comes: the rest must be stored, checked below)
        time.sleep(0.1)
    lines = processed()
    done = {x["i"] for x in lines}
    missing = expected - done
    if not world.group:
        missing -= raised  # left where it is, never deleted: checked with the stored below
    check_stored = set(raised if not world.group else ()) | (missing if weak else set())
    if check_stored:
        stored = _stored(world.b, world.sub_account)
        assert check_stored <= stored, f"deleted unprocessed: {sorted(check_stored - stored)}"
        missing -= stored
    if missing:  # where they are: the subscribers' account, and the gateway's two
        accounts = [(world.b, world.sub_account)]
        if world.gw is not None:
            accounts += [(world.a, world.gw[0]), (world.b, world.gw[1])]
        where = {address: {i: f for i, f in _where(server, address).items() if i in missing}
                 for server, address in accounts}  # fmt: skip
        tails = ["".join(peer.stderr)[-4000:] for peer in subs]
        pytest.fail(f"lost: {sorted(missing)}; stored: {where}; subscribers said: {tails}")
    # every repeat flagged (a message is its index and the publishing process's run)
    repeats = unflagged_repeats(lines)
    assert not repeats, f"repeated unflagged: {repeats}"
    if poison:
        more = deadline_loop(60)
        while more() and _quarantined(world.b, world.sub_account) < poison:
            time.sleep(0.2)
        assert _quarantined(world.b, world.sub_account) >= poison, "poison not quarantined"
    assert max((x["hwm"] for x in lines), default=0) <= MAX_RSS_MB
