"""Stem, YMP and floctrl over real email: two or three independent Postfix + Dovecot
instances (own domains, ports and state directories, exchanging no mail), joined only by
gateways. Every message is delivered once, none loops, bad input is refused with a reason
and stays in the mailbox while the receiver goes on."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import emailmw
from emailmw import floctrl, stem, ymp
from emailmw.testing.mailserver import MailServer
from tests.email.helpers import folder_subjects, inject
from tests.faces_helpers import (
    PARTICIPANTS,
    Calls,
    Recording,
    floctrl_world,
    hub_of,
    ring_of_three,
    wait_until,
    worker_pool,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def contexts() -> Iterator[list[emailmw.Context]]:
    made: list[emailmw.Context] = []
    yield made
    for context in made:
        context.shutdown()


def hub_maker(
    server: MailServer, made: list[emailmw.Context], **extra: Any
) -> Callable[..., emailmw.Context]:
    """``make(address, hub, routes)``: a context on ``server`` owning hub ``hub``."""

    def make(address: str, hub: str, routes: dict[str, str]) -> emailmw.Context:
        routing = {"hub": hub, "routes": routes}
        context = emailmw.Context({"email": server.config(address, routing=routing, **extra)})
        made.append(context)
        return context

    return make


def gateway_context(server: MailServer, address: str, hub: str) -> emailmw.Context:
    return emailmw.Context({"email": server.config(address, routing={"hub": hub})})


def stored(server: MailServer, address: str, subject: str) -> int:
    """How many emails with ``subject`` are in ``address``'s INBOX."""
    return sum(subject.encode() in line for line in folder_subjects(server, address))


def routed_raw(to: str, envelope: dict[str, str], body: str, subject: str) -> bytes:
    headers = {
        "From": "alice@x",
        "To": to,
        "Subject": subject,
        "Message-ID": f"<{os.urandom(6).hex()}@bad.test>",
        "Source-Timestamp": "1",
        "Route-From": "far:x:",
        "Route-Hops": "0",
        "Route-Face": "stem",
        **envelope,
    }
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (head + "\r\n" + body + "\r\n").encode()


@pytest.fixture
def two_hubs(
    mailserver: MailServer, second_mailserver: MailServer, contexts: list[emailmw.Context]
) -> Iterator[dict[str, Any]]:
    """Hub ``lab`` on the first server, hub ``far`` on the second, a gateway between them
    (accounts ``ga`` and ``gb``); lab's DEFAULT route is the gateway, whose DEFAULT is far.
    far deletes what it delivered (``on-receive: delete``): what it drops must stay."""
    a, b = mailserver, second_mailserver
    la, ga = a.fresh_account(), a.fresh_account()
    fb, gb = b.fresh_account(), b.fresh_account()
    lab = hub_maker(a, contexts)(la, "lab", {"far": ga, "DEFAULT": ga})
    far = hub_maker(b, contexts, **{"on-receive": "delete"})(fb, "far", {"lab": gb})
    gateway = emailmw.Gateway(
        {"a": gateway_context(a, ga, "gwa"), "b": gateway_context(b, gb, "gwb")},
        {"lab": (la, "a"), "far": (fb, "b"), "DEFAULT": (fb, "b")},
    )
    with gateway:
        gateway.start()
        yield {"lab": lab, "far": far, "gateway": gateway, "far_address": fb, "b": b}


def test_stem_across_two_mail_servers_through_a_gateway(
    two_hubs: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    lab, far = two_hubs["lab"], two_hubs["far"]
    calls = Calls()

    class Status(Recording):
        def status_cmd(self, msg: stem.StemMessage) -> str:
            return f"fine, asked by {msg.from_}"

    Status("status", calls, context=far)
    client = stem.Cell("client", context=lab)
    assert client.request("far:status", "status").result(30) == "fine, asked by lab:client"
    # no hub, not on lab: lab's DEFAULT route, then the gateway's, reaches far
    client.send("status", type="foo", data="by default")
    assert calls.wait(lambda c: any(i[3] == "by default" for i in c), 30)
    # hub named, cell missing: dropped at far with the reason, the email stays there
    caplog.set_level(logging.WARNING, "emailmw.routing")
    client.send("far:nocell", type="foo", data="lost", ack_req=True)
    assert wait_until(lambda: far.router.counts["dropped"] == 1, 30)
    assert far.router.drops == Counter({"no endpoint 'nocell' on hub 'far'": 1})
    assert stored(two_hubs["b"], two_hubs["far_address"], "stem foo to far:nocell") == 1
    assert wait_until(lambda: stored(two_hubs["b"], two_hubs["far_address"], "stem foo") == 1)
    assert stored(two_hubs["b"], two_hubs["far_address"], "stem cmd status") == 0
    report = two_hubs["gateway"].report()
    assert report["relayed"] == 4  # the cmd, its response, the default one, the lost one
    assert report["dropped"] == 0


def test_bad_routed_mail_is_refused_with_a_reason_stays_and_the_hub_goes_on(
    two_hubs: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    far, b, address = two_hubs["far"], two_hubs["b"], two_hubs["far_address"]
    calls = Calls()
    Recording("cell", calls, context=far)
    caplog.set_level(logging.WARNING)
    good = json.dumps({"type": "foo", "msg_id": 1})
    cases = {
        "malformed json": ({"Route-To": "far:cell:"}, "{oops"),
        "no cell": ({"Route-To": "far::"}, good),
        "empty parts": ({"Route-To": "::"}, good),
        "no type": ({"Route-To": "far:cell:"}, json.dumps({"msg_id": 1})),
        "bad face": ({"Route-To": "far:cell:", "Route-Face": "smtp"}, good),
    }
    for subject, (envelope, body) in cases.items():
        inject(b, address, routed_raw(address, envelope, body, subject))
    reasons = ["not JSON", "Route-To", "Route-To", "type must be", "Route-Face"]
    assert wait_until(
        lambda: all(any(r in m.getMessage() for m in caplog.records) for r in reasons), 30
    ), [m.getMessage() for m in caplog.records]
    stem.Cell("s", context=two_hubs["lab"]).send("far:cell", type="foo", data="after")
    assert calls.wait(lambda c: [i[3] for i in c] == ["after"], 30)
    for subject in cases:
        assert stored(b, address, subject) == 1, subject


def test_a_ring_of_three_mail_servers_delivers_every_message_once_and_none_loops(
    mailserver: MailServer,
    second_mailserver: MailServer,
    third_mailserver: MailServer,
    contexts: list[emailmw.Context],
    caplog: pytest.LogCaptureFixture,
) -> None:
    servers = {"x": mailserver, "y": second_mailserver, "z": third_mailserver}
    hub_address = {h: s.fresh_account() for h, s in servers.items()}
    gw_address = {(g, s): servers[s].fresh_account() for g in ("xy", "yz", "zx") for s in g}

    def make(address: str, hub: str, routes: dict[str, str]) -> emailmw.Context:
        return hub_maker(servers[hub], contexts)(address, hub, routes)

    def account(gateway: str, side: str) -> emailmw.Context:
        return gateway_context(servers[side], gw_address[gateway, side], f"gw{gateway}{side}")

    caplog.set_level(logging.WARNING, "emailmw.routing")
    with ring_of_three(make, account, hub_address, lambda g, s: gw_address[g, s]) as (hubs, gws):
        calls = Calls()
        senders = {}
        for hub, context in hubs.items():
            Recording("cell", calls, context=context)
            senders[hub] = stem.Cell("sender", context=context)
        for src in "xyz":
            for dst in "xyz":
                senders[src].send(f"{dst}:cell", type="foo", data=f"{src}>{dst}")
        assert calls.wait(lambda c: len(c) == 9, 60)
        assert sorted(i[3] for i in calls.items) == sorted(f"{s}>{d}" for s in "xyz" for d in "xyz")
        assert all(i[1] == f"{i[3][-1]}:cell" for i in calls.items)
        senders["x"].send("lost:cell", type="foo", data="lost")
        assert wait_until(lambda: any("hop limit" in r.getMessage() for r in caplog.records), 60)
        assert sum(g.report()["relayed"] for g in gws) == 6 + 8
        assert len(calls.items) == 9


def test_ymp_across_two_mail_servers_and_the_connection_check(
    mailserver: MailServer,
    second_mailserver: MailServer,
    contexts: list[emailmw.Context],
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = mailserver, second_mailserver
    one, ga, two, gb = a.fresh_account(), a.fresh_account(), b.fresh_account(), b.fresh_account()
    h1 = ymp.YmpHost(context=hub_maker(a, contexts)(one, "host1.example.com",
                                                    {"host2.example.com": ga}))  # fmt: skip
    h2 = ymp.YmpHost(context=hub_maker(b, contexts)(two, "host2.example.com",
                                                    {"host1.example.com": gb}))  # fmt: skip
    h2.add_service("example", "repository", {"post example": lambda r: {"status": "ok"}})
    routes = {"host1.example.com": (one, "a"), "host2.example.com": (two, "b")}
    with emailmw.Gateway({"a": gateway_context(a, ga, "gwa"), "b": gateway_context(b, gb, "gwb")},
                 routes) as gateway:  # fmt: skip
        gateway.start()
        futures = h1.request_many(
            "host2.example.com",
            [("example", "repository", "post example", {"n": i}) for i in range(3)],
        )
        assert [f.result(30).payload for f in futures] == [{"status": "ok"}] * 3
        # alice on b.test claims to be host1: the connection (her account) says otherwise
        caplog.set_level(logging.WARNING, "emailmw.routing")
        request = {
            "sender": {"host": "host1.example.com", "protocol": "p", "service": "s"},
            "id": "spoof", "host": "host2.example.com", "protocol": "example",
            "service": "repository", "action": "post example", "payload": {},
        }  # fmt: skip
        envelope = {"Route-To": "host2.example.com:ymp:", "Route-From":
                    "host1.example.com:ymp:", "Route-Face": "ymp"}  # fmt: skip
        inject(b, two, routed_raw(two, envelope, json.dumps(request), "spoofed"))
        # a YMP message with a property the spec does not have, from the right connection
        extra = {**request, "sender": {**request["sender"], "host": "host2.example.com"},
                 "extra": 1}  # fmt: skip
        inject(b, two, routed_raw(two, {**envelope, "From": two}, json.dumps(extra), "extra"))
        for reason in ("does not match the connection", "unexpected property: extra"):
            assert wait_until(
                lambda r=reason: any(r in m.getMessage() for m in caplog.records), 30
            ), reason
        assert stored(b, two, "spoofed") == 1
        assert stored(b, two, "extra") == 1
        # the host goes on
        answer = h1.request("host2.example.com", "example", "repository", "post example", {})
        assert answer.result(30).payload == {"status": "ok"}


def test_floctrl_chat_across_two_orchestras_on_two_mail_servers(
    mailserver: MailServer, second_mailserver: MailServer, contexts: list[emailmw.Context]
) -> None:
    servers = {"A": mailserver, "B": second_mailserver}
    address = {hub_of(p): servers[p.split("/")[1]].fresh_account() for p in PARTICIPANTS}
    gw = {o: s.fresh_account() for o, s in servers.items()}

    def orch_of(hub: str) -> str:
        return hub.split("_", maxsplit=1)[0]

    def make(addr: str, hub: str, routes: dict[str, str]) -> emailmw.Context:
        return hub_maker(servers[orch_of(hub)], contexts)(addr, hub, routes)

    def route(src: str, dst: str) -> str:
        return address[dst] if orch_of(src) == orch_of(dst) else gw[orch_of(src)]

    routes = {hub: (addr, orch_of(hub)) for hub, addr in address.items()}
    accounts = {o: gateway_context(s, gw[o], f"gw{o}") for o, s in servers.items()}
    with (
        emailmw.Gateway(accounts, routes) as gateway,
        floctrl_world(address.__getitem__, make, route) as world,
    ):
        gateway.start()
        calls = Calls()
        for path, participant in world.items():
            participant.subscribe_to("chat", lambda m, p=path: calls.add((p, m.address, m.body)))
        world["/A/n1"].publish(floctrl.Message(1, "/*/*", "chat", "hello everyone"))
        world["/B/m2"].publish(floctrl.Message(2, "/A/*", "chat", "hello A"))
        expected = {
            "hello everyone": {"/A": "/A/*", "/A/n1": "/*/*", "/A/n2": "/A/*", "/B": "/B/*",
                               "/B/m1": "/B/*", "/B/m2": "/B/*"},
            "hello A": {"/A": "/A/*", "/A/n1": "/A/*", "/A/n2": "/A/*"},
        }  # fmt: skip
        assert calls.wait(lambda c: len(c) == 9, 60)
        for body, receivers in expected.items():
            got = {i[0]: i[1] for i in calls.items if i[2] == body}
            assert got == receivers, body
        # one more from each side: still exactly once each, nothing looped
        world["/B"].publish(floctrl.Message(3, "/*", "chat", "supernodes"))
        assert calls.wait(lambda c: len(c) == 11, 60)
        assert sorted(i[0] for i in calls.items if i[2] == "supernodes") == ["/A", "/B"]


def test_the_gateway_command_relays_and_survives_sigkill_without_losing_or_repeating(
    mailserver: MailServer,
    second_mailserver: MailServer,
    contexts: list[emailmw.Context],
    tmp_path: Path,
) -> None:
    """``emailmw gateway`` in its own process, killed with SIGKILL mid-stream and
    restarted: with state files every message arrives, and none twice (a re-forwarded
    email has the same Message-ID, which the receiver drops)."""
    a, b = mailserver, second_mailserver
    la, ga, fb, gb = a.fresh_account(), a.fresh_account(), b.fresh_account(), b.fresh_account()
    lab = hub_maker(a, contexts)(la, "lab", {"far": ga})
    far = hub_maker(b, contexts)(fb, "far", {"lab": gb})
    config = tmp_path / "gateway.yml"
    config.write_text(yaml.safe_dump({
        "accounts": {
            "a": a.config(ga, routing={"hub": "gwa"}, **{"state-file": str(tmp_path / "a.state")}),
            "b": b.config(gb, routing={"hub": "gwb"}, **{"state-file": str(tmp_path / "b.state")}),
        },
        "routes": {"lab": {"to": la, "via": "a"}, "far": {"to": fb, "via": "b"}},
    }))  # fmt: skip
    calls = Calls()
    Recording("cell", calls, context=far)
    sender = stem.Cell("s", context=lab)

    runs = iter(range(2))

    def start() -> subprocess.Popen[bytes]:
        run = next(runs)
        with (tmp_path / f"out{run}").open("wb") as out, (tmp_path / f"err{run}").open("wb") as err:
            return subprocess.Popen(
                [sys.executable, "-m", "emailmw", "gateway", str(config), "--report-every", "1"],
                cwd=ROOT, stdout=out, stderr=err,
            )  # fmt: skip

    def ready(run: int) -> bool:  # connected: mail from now on is the gateway's
        path = tmp_path / f"err{run}"
        return wait_until(lambda: "relaying between" in path.read_text(), 30)

    gateway = start()
    try:
        assert ready(0)
        for i in range(40):
            sender.send("far:cell", type="foo", data=i)
        assert calls.wait(lambda c: len(c) >= 10, 60), (tmp_path / "err0").read_text()
        gateway.send_signal(signal.SIGKILL)
        gateway.wait(10)
        for i in range(40, 60):
            sender.send("far:cell", type="foo", data=i)
        gateway = start()
        assert calls.wait(lambda c: len({i[3] for i in c}) == 60, 90)
        # the restarted gateway has caught up: one more message is the last to arrive
        sender.send("far:cell", type="foo", data="last")
        assert calls.wait(lambda c: c[-1][3] == "last", 60)
        data = [i[3] for i in calls.items]
        assert sorted(Counter(data).values()) == [1] * 61
    finally:
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(20)
    final = json.loads((tmp_path / "out1").read_text().strip().splitlines()[-1])
    assert final["final"] is True
    assert final["dropped"] == 0
    assert "relaying between a (gwa), b (gwb)" in (tmp_path / "err1").read_text()


def test_stem_send_command_asks_a_cell_and_prints_the_response(
    mailserver: MailServer, contexts: list[emailmw.Context], tmp_path: Path
) -> None:
    lab_address, cli_address = mailserver.fresh_account(), mailserver.fresh_account()
    lab = hub_maker(mailserver, contexts)(lab_address, "lab", {"desk": cli_address})

    class Status(stem.Cell):
        def status_cmd(self, msg: stem.StemMessage) -> dict[str, Any]:
            return {"status": "fine", "asked": msg.data}

    Status("status", context=lab)
    config = tmp_path / "cli.yml"
    routing = {"hub": "desk", "routes": {"lab": lab_address}}
    config.write_text(yaml.safe_dump({"email": mailserver.config(cli_address, routing=routing)}))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "emailmw", "stem", "send", *args, "--config", str(config)],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    done = cli("lab:status", "--cmd", "status", "--data", "[1, 2]")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"status": "fine", "asked": [1, 2]}
    wrong = cli("nowhere:status", "--cmd", "status")
    assert wrong.returncode == 1
    assert wrong.stderr.strip() == (
        "emailmw: error: cannot send to nowhere:status: no route to hub 'nowhere'"
    )


@pytest.mark.parametrize("transport", ["native", "curl"])
def test_floctrl_a_worker_pool_over_real_mail_shares_jobs_and_loses_none_when_one_closes(
    mailserver: MailServer, contexts: list[emailmw.Context], transport: str
) -> None:
    """/orch/worker run by three contexts on one account (its supernode on another), each
    subscribed to "jobs" in a stateless group: each job is processed once, by one of them;
    one leaving mid-stream holding claims loses nothing (the others take them over)."""
    import dataclasses

    from emailmw.testing._modes import FAST

    extra = {"polling-period": 20_000_000} if transport == "curl" else {}
    make = hub_maker(mailserver, contexts, transport=transport, **extra)
    orchestra, worker = mailserver.fresh_account(), mailserver.fresh_account()
    with worker_pool(make, orchestra, worker, 3) as (supernode, nodes):
        got = Calls()
        settings = dataclasses.replace(FAST, steal_after=600.0)
        for k, node in enumerate(nodes):
            node.subscribe_to("jobs", lambda m, k=k: got.add((m.body, k)), mode="stateless",
                              group="pool", group_settings=settings)  # fmt: skip
        members = [node._consumers[("jobs", "pool")].receiver for node in nodes]
        assert wait_until(lambda: all(len(member.alive) == 3 for member in members), 30)
        for i in range(30):
            supernode.publish(floctrl.Message(i, "/orch/worker", "jobs", str(i)))
        assert got.wait(lambda c: any(k == 0 for _, k in c), 30)
        nodes[0].close()  # leaves: what it claimed and did not process goes to the others
        for i in range(30, 40):
            supernode.publish(floctrl.Message(i, "/orch/worker", "jobs", str(i)))
        assert got.wait(lambda c: {body for body, _ in c} == {str(i) for i in range(40)}, 60)
        # each processed once (a leaving member settles what it processed before it goes)
        assert sorted(Counter(body for body, _ in got.items).values()) == [1] * 40


@pytest.fixture(scope="module")
def stoppable_server(mailserver: MailServer) -> Iterator[MailServer]:
    """A mail server of this module's own (domain ``d.test``), whose SMTP a test stops
    and starts."""
    del mailserver
    state = Path(f"/tmp/emailmw-gw-{os.urandom(4).hex()}")
    server = MailServer(state_dir=state, domain="d.test", pool_size=20)
    server.start(fresh=True)
    yield server
    server.stop()
    shutil.rmtree(state, ignore_errors=True)


def test_a_gateway_forwards_what_came_while_the_next_server_was_down(
    mailserver: MailServer,
    stoppable_server: MailServer,
    contexts: list[emailmw.Context],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """#57: the next server's SMTP is down longer than the gateway's send timeout: the
    Stem messages that come meanwhile wait in the gateway (unsettled, in its mailbox) and
    are forwarded, in order, once that server is back; none is dropped, none repeated.
    Was: each dropped at the first failure and left in the gateway's mailbox, never
    forwarded."""
    a, b = mailserver, stoppable_server
    la, ga, fb, gb = a.fresh_account(), a.fresh_account(), b.fresh_account(), b.fresh_account()
    lab = hub_maker(a, contexts)(la, "lab", {"far": ga})
    far = hub_maker(b, contexts)(fb, "far", {"lab": gb})
    quick = {"timeout": 2}  # (the gateway gives up a send after 2 s: its retries then)
    gateway = emailmw.Gateway(
        {"a": emailmw.Context({"email": a.config(ga, routing={"hub": "gwa"}, **quick)}),
         "b": emailmw.Context({"email": b.config(gb, routing={"hub": "gwb"}, **quick)})},
        {"lab": (la, "a"), "far": (fb, "b")},
    )  # fmt: skip
    calls = Calls()
    Recording("cell", calls, context=far)
    sender = stem.Cell("s", context=lab)
    caplog.set_level(logging.WARNING, "emailmw.routing")
    with gateway:
        gateway.start()
        sender.send("far:cell", type="foo", data=0)
        assert calls.wait(lambda c: len(c) == 1, 60)
        b.stop_postfix()
        try:
            for i in range(1, 6):
                sender.send("far:cell", type="foo", data=i)
            assert wait_until(
                lambda: any("forwarding to" in r.getMessage() for r in caplog.records), 60
            )
        finally:
            b.start_postfix()
        assert calls.wait(lambda c: len(c) == 6, 120), calls.items
        # (each once; their order is the far server's delivery order: Postfix delivers
        # what it accepted together in parallel)
        assert sorted(i[3] for i in calls.items) == list(range(6))
        # (said once the last waiting copy is accepted: it may reach the cell first)
        assert wait_until(lambda: any("works again" in r.getMessage() for r in caplog.records), 30)
        report = gateway.report()
        assert report["dropped"] == 0
        assert report["relayed"] == 6


def test_the_gateway_command_started_while_a_server_is_down_waits_for_it(
    mailserver: MailServer,
    stoppable_server: MailServer,
    contexts: list[emailmw.Context],
    tmp_path: Path,
) -> None:
    """``emailmw gateway`` started while one of its servers does not answer (restarting)
    says so in one line and tries again until it answers, then relays; a gateway is a
    daemon, it never exits because a server is down. Was: exit 1 with the connect error,
    and nothing relayed until someone started it again (the fleet soak, bench/fleet.py)."""
    a, b = mailserver, stoppable_server
    la, ga, fb, gb = a.fresh_account(), a.fresh_account(), b.fresh_account(), b.fresh_account()
    lab = hub_maker(a, contexts)(la, "lab", {"far": ga})
    config = tmp_path / "gateway.yml"
    config.write_text(yaml.safe_dump({
        "accounts": {"a": a.config(ga, routing={"hub": "gwa"}),
                     "b": b.config(gb, routing={"hub": "gwb"})},
        "routes": {"lab": {"to": la, "via": "a"}, "far": {"to": fb, "via": "b"}},
    }))  # fmt: skip
    err = tmp_path / "err"
    b.stop_dovecot()
    try:
        with err.open("wb") as stream:
            gateway = subprocess.Popen(
                [sys.executable, "-m", "emailmw", "gateway", str(config)],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stream,
            )  # fmt: skip
        try:
            assert wait_until(lambda: "trying again until it answers" in err.read_text(), 60)
            assert gateway.poll() is None, err.read_text()
        finally:
            b.start_dovecot()
        assert wait_until(lambda: "relaying between" in err.read_text(), 90), err.read_text()
        lines = err.read_text().splitlines()
        assert len([line for line in lines if "trying again" in line]) == 1, lines
        calls = Calls()
        far = hub_maker(b, contexts)(fb, "far", {"lab": gb})
        Recording("cell", calls, context=far)
        stem.Cell("s", context=lab).send("far:cell", type="foo", data=1)
        assert calls.wait(lambda c: len(c) == 1, 90)
    finally:
        gateway.send_signal(signal.SIGINT)
        assert gateway.wait(30) == 0
