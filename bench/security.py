"""Security benchmark: the cost of signing and verifying, and what it adds end to end.

    python bench/security.py [--messages 200] [--rate 10] [--json FILE]

All in one run, on this machine:

* ``sign_us`` / ``verify_us``: one 1 kB message (emailmw's Emailmw-Signature: Ed25519 over
  the parsed email); ``verify_us`` is what the receiver does per email (read the header,
  look up the trusted key, verify), ``decide_us`` the whole enforce decision (also replay
  window, seen set, grant). The same for DKIM (RFC 6376 with Ed25519, RFC 8463; dkimpy,
  relaxed/relaxed, the public key served from memory instead of DNS): the alternative the
  choice was measured against (docs/security.md);
* which signatures survive: the bytes as sent; a relay that downgrades the 8bit body to
  quoted-printable and re-folds a header (RFC 6152: what a hop without 8BITMIME does); the
  real Postfix + Dovecot (sent over SMTPS, read back from the Maildir file);
* end-to-end latency publish -> received over the local server, native transport, with
  ``verify: off`` and with ``verify: enforce`` (signed by the publisher, a permissions file,
  the seen set in a state file), ``--messages`` at ``--rate`` msg/s, interleaved runs.

* ``routed_off_p50_ms`` / ``routed_enforce_p50_ms``: a Stem command round trip (request
  and response, each signed, its originator signature checked and its face grants
  decided in enforce) between two accounts of the local server;
* ``relay_off_p50_ms`` / ``relay_verify_p50_ms``: a Stem message from one mail server to
  another through one ``Gateway`` (publish -> delivered), the chain of custody checked at
  the end (originator signature, hop signature, Route-Via) with enforce;
* ``quiet_legit_p50_ms`` / ``refused_flood_legit_p50_ms``: publish -> received in enforce,
  without and with 2,000 refused (unsigned) mails sent into the same inbox meanwhile.

Targets (issue #24): sign + verify <= 200 us per message; enforce p50 <= 1.1x off p50.
Targets (issue #35): routed enforce <= 1.15x off; relay verify <= 1.2x off; legit p50
during a refused-mail flood <= 3x quiet.
Starts its own server (state /tmp/emailmw-benchsec, ports free at start; needs root).
Prints a table, writes JSON (``--json``), exits 0.
"""

from __future__ import annotations

import argparse
import base64
import json
import quopri
import smtplib
import ssl
import statistics
import tempfile
import threading
import time
import timeit
from pathlib import Path
from typing import Any

import dkim

import emailmw
from emailmw import Email, Keystore
from emailmw._core.config import SecurityOptions
from emailmw._core.protocol import Recipients, classify, publish_email
from emailmw._core.types import Gid
from emailmw._core.wire import build, parse, prepare_outgoing
from emailmw._security import Security, read_signature, sign, verify
from emailmw.testing.mailserver import MailServer

RECIPIENTS = Recipients("talker@example.test", ("inbox@example.test",))
BODY = "\n".join(["sensor reading 0123456789 " * 2] * 19)[:1023] + "é"  # 1 kB, 8bit lines


def message(seq: int = 0) -> Email:
    email = publish_email(
        "/bench", BODY, recipients=RECIPIENTS, gid=Gid(1), sequence_number=seq,
        timestamp_ns=time.time_ns(),
    )  # fmt: skip
    return prepare_outgoing(email, RECIPIENTS.from_)


def per_call_us(func: Any, number: int = 2000, repeat: int = 5) -> float:
    return min(timeit.repeat(func, number=number, repeat=repeat)) / number * 1e6


# ----------------------------------------------------------------------------- DKIM


class Dkim:
    """DKIM with the identity's Ed25519 key (RFC 8463), selector = identity name."""

    HEADERS = (b"subject", b"from", b"message-id", b"in-reply-to", b"date",
               b"source-timestamp", b"publisher-gid", b"publisher-sequence-number")  # fmt: skip

    def __init__(self, keystore: Keystore, name: str) -> None:
        from cryptography.hazmat.primitives import serialization

        identity = keystore.identity(name)
        raw = serialization.Encoding.Raw
        self.private = base64.b64encode(
            identity.signing_key.private_bytes(
                raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
            )
        )
        public = identity.signing_key.public_key().public_bytes(raw, serialization.PublicFormat.Raw)
        self.record = b"v=DKIM1; k=ed25519; p=" + base64.b64encode(public)
        self.selector = name.encode()

    def sign(self, raw: bytes) -> bytes:
        header = dkim.sign(
            raw,
            self.selector,
            b"example.test",
            self.private,
            signature_algorithm=b"ed25519-sha256",
            include_headers=list(self.HEADERS),
            canonicalize=(b"relaxed", b"relaxed"),
        )
        return header + raw

    def verify(self, raw: bytes) -> bool:
        return bool(dkim.verify(raw, dnsfunc=lambda *_a, **_k: self.record))


# ----------------------------------------------------------------------------- survival


def relay(raw: bytes) -> bytes:
    """A hop without 8BITMIME: the body re-encoded as quoted-printable, Subject re-folded,
    a Received line added."""
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"Content-Transfer-Encoding: base64" in head:
        body = base64.b64decode(body).replace(b"\n", b"\r\n")
    lines = [
        line.replace(b": ", b":\r\n ", 1) if line.startswith(b"Subject") else line
        for line in head.split(b"\r\n")
        if not line.lower().startswith(b"content-transfer-encoding")
    ]
    lines.insert(0, b"Received: from hop.example.test by mx.example.test")
    lines.append(b"Content-Transfer-Encoding: quoted-printable")
    text = quopri.encodestring(body.replace(b"\r\n", b"\n"))  # the lines, not their CRs
    return b"\r\n".join(lines) + b"\r\n\r\n" + text.replace(b"\n", b"\r\n")


def ours_valid(raw: bytes, keystore: Keystore) -> bool:
    try:
        email = parse(raw)
    except emailmw.EmailMWError:
        return False
    signature = read_signature(email)
    if signature is None or isinstance(signature, str):
        return False
    return verify(email, signature, keystore.trusted()[signature.identity].verify_key)


def through_server(server: MailServer, raw: bytes) -> bytes:
    to = server.fresh_account()
    context = ssl.create_default_context(cafile=str(server.ca_file))
    before = set(_files(server, to))
    with smtplib.SMTP_SSL(server.host, server.smtps_port, context=context) as smtp:
        smtp.login(server.address("alice"), server.password)
        smtp.sendmail(server.address("alice"), [to], raw)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        new = set(_files(server, to)) - before
        if new:
            return new.pop().read_bytes()
        time.sleep(0.02)
    raise RuntimeError("the test email never reached the Maildir")


def _files(server: MailServer, address: str) -> list[Path]:
    root = server.maildir(address)
    return [p for sub in ("new", "cur") for p in (root / sub).glob("*")]


# ----------------------------------------------------------------------------- end to end


def paced(
    sub: emailmw.Subscription,
    pub: emailmw.Publisher,
    count: int,
    rate: float,
    body: str,
    *,
    alongside: list[threading.Thread] | None = None,
) -> list[float]:
    """Publish ``count`` messages (``n: I`` + ``body``) at ``rate`` msg/s, the threads
    ``alongside`` running meanwhile; each one's publish -> received latency (ms)."""
    sent: dict[int, int] = {}
    latencies: list[float] = []

    def listen() -> None:
        for _ in range(count):
            got = emailmw.wait_for_message_with_info(sub, 120)
            if got is None:
                break
            seq = got[1].sequence_number
            assert seq is not None
            latencies.append((time.time_ns() - sent[seq]) / 1e6)

    listener = threading.Thread(target=listen)
    listener.start()
    for thread in alongside or ():
        thread.start()
    start = time.monotonic()
    for i in range(count):
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
        sent[i] = time.time_ns()
        pub.publish(f"n: {i}{body}")
    listener.join(600)
    for thread in alongside or ():
        thread.join(600)
    return latencies


def latency_run(
    server: MailServer, keystore: Keystore | None, count: int, rate: float, state: Path | None
) -> dict[str, float]:
    """One paced run; ``keystore``: enforce (else off); ``state``: the receiver keeps a
    state file there (with enforce, the seen set is kept next to it)."""
    sender, receiver = server.fresh_account(), server.fresh_account()
    sub_extra: dict[str, Any] = {}
    pub_extra: dict[str, Any] = {}
    if state is not None:
        sub_extra["state-file"] = str(state / f"{receiver}.json")
    if keystore is not None:
        sub_extra["security"] = {"keystore": str(keystore.path), "identity": "listener"}
        pub_extra = {"security": {"keystore": str(keystore.path), "identity": "talker"}}
    sub_ctx = emailmw.Context({"email": server.config(receiver, **sub_extra)})
    pub_ctx = emailmw.Context({"email": server.config(sender, to=receiver, **pub_extra)})
    sub = emailmw.Subscription("/bench", context=sub_ctx)
    pub = emailmw.Publisher("/bench", context=pub_ctx)
    latencies = paced(sub, pub, count, rate, " " + BODY)
    verified = sub_ctx.security.counts["verified"]
    pub_ctx.shutdown()
    sub_ctx.shutdown()
    return {"received": len(latencies), "p50_ms": statistics.median(latencies),
            "verified": verified}  # fmt: skip


PATH_PERMISSIONS = """\
identities:
  talker: {publish: [/bench], stem: {send: ["/**"], as: ["/**"]}}
  listener: {subscribe: [/bench], stem: {send: ["/**"], as: ["/**"]}}
  gw: {relay: ["/stem/**"]}
"""


def _secure(keystore: Keystore | None, identity: str) -> dict[str, Any]:
    if keystore is None:
        return {}
    return {"security": {"keystore": str(keystore.path), "identity": identity}}


def routed_run(server: MailServer, keystore: Keystore | None, count: int) -> float:
    """p50 (ms) of ``count`` Stem command round trips base -> robot -> base."""
    from emailmw import stem

    base_box, robot_box = server.fresh_account(), server.fresh_account()
    robot = emailmw.Context({"email": server.config(
        robot_box, routing={"hub": "robot", "routes": {"base": base_box}},
        **_secure(keystore, "listener"))})  # fmt: skip
    base = emailmw.Context({"email": server.config(
        base_box, routing={"hub": "base", "routes": {"robot": robot_box}},
        **_secure(keystore, "talker"))})  # fmt: skip

    class Arm(stem.Cell):
        def status_cmd(self, msg: stem.StemMessage) -> str:
            return "fine"

    Arm("arm", context=robot)
    station = stem.Cell("station", context=base)
    station.request("robot:arm", "status").result(60)  # warm up
    times = []
    for _ in range(count):
        start = time.perf_counter()
        station.request("robot:arm", "status").result(60)
        times.append((time.perf_counter() - start) * 1000)
    base.shutdown()
    robot.shutdown()
    return statistics.median(times)


def relay_run(
    a: MailServer, b: MailServer, keystore: Keystore | None, count: int, rate: float
) -> float:
    """p50 (ms) of ``count`` Stem messages lab (server a) -> gateway -> far (server b)."""
    from emailmw import stem

    la, ga, fb, gb = a.fresh_account(), a.fresh_account(), b.fresh_account(), b.fresh_account()
    if keystore is not None:  # the gateway's identity is bound to the accounts it reads
        (keystore.path / "permissions.yaml").write_text(
            PATH_PERMISSIONS.replace('gw: {relay: ["/stem/**"]}',
                                     f'gw: {{relay: ["/stem/**"], accounts: [{ga}, {gb}]}}')
        )  # fmt: skip
    lab = emailmw.Context({"email": a.config(la, routing={"hub": "lab", "routes": {"far": ga}},
                                             **_secure(keystore, "talker"))})  # fmt: skip
    far = emailmw.Context({"email": b.config(fb, routing={"hub": "far", "routes": {"lab": gb}},
                                             **_secure(keystore, "listener"))})  # fmt: skip
    got: dict[int, float] = {}
    arrived = threading.Condition()

    class Arm(stem.Cell):
        def data_in(self, msg: stem.StemMessage) -> None:
            with arrived:
                got[int(msg.data)] = time.time_ns() / 1e6
                arrived.notify_all()

    Arm("arm", context=far)
    gateway = emailmw.Gateway(
        {name: emailmw.Context({"email": server.config(
            box, routing={"hub": name}, **_secure(keystore, "gw"))})
         for name, server, box in (("a", a, ga), ("b", b, gb))},
        {"lab": (la, "a"), "far": (fb, "b")},
    )  # fmt: skip
    sent: dict[int, float] = {}
    with gateway:
        gateway.start()
        cell = stem.Cell("station", context=lab)
        start = time.monotonic()
        for i in range(count):
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
            sent[i] = time.time_ns() / 1e6
            cell.send("far:arm", data=i)
        with arrived:
            arrived.wait_for(lambda: len(got) == count, 300)
    lab.shutdown()
    far.shutdown()
    return statistics.median(got[i] - sent[i] for i in got)


def flood_run(
    server: MailServer, keystore: Keystore, count: int, rate: float, flood: int
) -> dict[str, float]:
    """publish -> received p50 in enforce; ``flood`` unsigned mails sent into the same
    inbox meanwhile (by 4 SMTP connections), all quarantined."""
    sender, receiver = server.fresh_account(), server.fresh_account()
    sub_ctx = emailmw.Context({"email": server.config(receiver, **_secure(keystore, "listener"))})
    pub_ctx = emailmw.Context({"email": server.config(sender, to=receiver,
                                                      **_secure(keystore, "talker"))})  # fmt: skip
    sub = emailmw.Subscription("/bench", context=sub_ctx)
    pub = emailmw.Publisher("/bench", context=pub_ctx)

    def flooder(n: int) -> None:
        context = ssl.create_default_context(cafile=str(server.ca_file))
        with smtplib.SMTP_SSL(server.host, server.smtps_port, context=context) as smtp:
            smtp.login(server.address("alice"), server.password)
            for i in range(n):
                raw = (f"From: alice@example.test\r\nTo: {receiver}\r\nSubject: /bench\r\n"
                       f"Message-ID: <f{i}.{time.time_ns()}@flood.test>\r\n"
                       f"Source-Timestamp: {time.time_ns()}\r\nPublisher-GID: 9\r\n\r\n"
                       "forged\r\n").encode()  # fmt: skip
                smtp.sendmail(server.address("alice"), [receiver], raw)

    floods = [
        threading.Thread(target=flooder, args=(flood // 4,)) for _ in range(4 if flood else 0)
    ]
    latencies = paced(sub, pub, count, rate, "", alongside=floods)
    refused = sub_ctx.security.counts["unsigned"]
    pub_ctx.shutdown()
    sub_ctx.shutdown()
    return {"p50_ms": statistics.median(latencies), "max_ms": max(latencies),
            "received": len(latencies), "refused": refused}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved runs of each mode")
    parser.add_argument("--round-trips", type=int, default=40, help="Stem commands per run")
    parser.add_argument("--flood", type=int, default=2000, help="refused mails per flood run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="emailmw-benchsec-"))
    keystore = Keystore.create(work / "keystore")
    for name in ("talker", "listener"):
        keystore.create_key(name)
    keystore.create_key("gw")
    (keystore.path / "permissions.yaml").write_text(PATH_PERMISSIONS)
    talker = keystore.identity("talker")
    email = message()
    signed = sign(email, talker)
    arrived = parse(build(signed))
    enforce = Security(SecurityOptions(keystore=str(keystore.path), identity="listener",
                                       verify="enforce"))  # fmt: skip
    route = classify(arrived, time.time_ns())
    counter = iter(range(10**9))

    def decide() -> None:  # a fresh Message-ID each time: not a replay
        fresh = arrived.replace(message_id=f"<{next(counter)}@b>")
        enforce.incoming(fresh, route)

    def check() -> bool:
        found = read_signature(arrived)
        assert found is not None
        assert not isinstance(found, str)
        return verify(arrived, found, keystore.trusted()[found.identity].verify_key)

    dkim_signer = Dkim(keystore, "talker")
    raw = build(email)
    dkim_raw = dkim_signer.sign(raw)
    results: dict[str, Any] = {
        "sign_us": per_call_us(lambda: sign(email, talker)),
        "verify_us": per_call_us(check),
        "decide_us": per_call_us(decide, number=500)
        - per_call_us(lambda: arrived.replace(message_id="<x@b>"), number=500),
        "dkim_sign_us": per_call_us(lambda: dkim_signer.sign(raw), number=300),
        "dkim_verify_us": per_call_us(lambda: dkim_signer.verify(dkim_raw), number=300),
    }
    results["sign_plus_verify_us"] = results["sign_us"] + results["verify_us"]

    both = dkim_signer.sign(build(signed))  # one email with both signatures
    server = MailServer(state_dir=Path("/tmp/emailmw-benchsec"), pool_size=200)
    server.start(fresh=True)
    try:
        stored = through_server(server, both)
        survival = {
            "as sent": (ours_valid(both, keystore), dkim_signer.verify(both)),
            "relay without 8BITMIME": (
                ours_valid(relay(both), keystore),
                dkim_signer.verify(relay(both)),
            ),
            "Postfix + Dovecot": (ours_valid(stored, keystore), dkim_signer.verify(stored)),
        }
        modes = {
            "off": (None, None),
            "enforce": (keystore, None),
            "off_state_file": (None, work),
            "enforce_state_file": (keystore, work),
        }
        runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
        for _ in range(args.rounds):
            for mode, (keys, state) in modes.items():
                runs[mode].append(latency_run(server, keys, args.messages, args.rate, state))
        routed: dict[str, list[float]] = {"off": [], "enforce": []}
        relayed: dict[str, list[float]] = {"off": [], "verify": []}
        flooded: dict[str, list[dict[str, float]]] = {"quiet": [], "flood": []}
        second = MailServer(state_dir=Path("/tmp/emailmw-benchsec-b"), domain="b.test",
                            pool_size=200)  # fmt: skip
        second.start(fresh=True)
        try:
            for _ in range(args.rounds):
                routed["off"].append(routed_run(server, None, args.round_trips))
                routed["enforce"].append(routed_run(server, keystore, args.round_trips))
                relayed["off"].append(relay_run(server, second, None, args.messages // 2,
                                                args.rate))  # fmt: skip
                relayed["verify"].append(relay_run(server, second, keystore, args.messages // 2,
                                                   args.rate))  # fmt: skip
                flooded["quiet"].append(flood_run(server, keystore, args.messages, args.rate, 0))
                flooded["flood"].append(flood_run(server, keystore, args.messages, args.rate,
                                                  args.flood))  # fmt: skip
        finally:
            second.stop()
    finally:
        server.stop()
    results["routed_off_p50_ms"] = statistics.median(routed["off"])
    results["routed_enforce_p50_ms"] = statistics.median(routed["enforce"])
    results["routed_enforce_over_off"] = (
        results["routed_enforce_p50_ms"] / results["routed_off_p50_ms"]
    )
    results["relay_off_p50_ms"] = statistics.median(relayed["off"])
    results["relay_verify_p50_ms"] = statistics.median(relayed["verify"])
    results["relay_verify_over_off"] = results["relay_verify_p50_ms"] / results["relay_off_p50_ms"]
    results["quiet_legit_p50_ms"] = statistics.median(r["p50_ms"] for r in flooded["quiet"])
    results["refused_flood_legit_p50_ms"] = statistics.median(r["p50_ms"] for r in flooded["flood"])
    results["refused_flood_legit_max_ms"] = max(r["max_ms"] for r in flooded["flood"])
    results["refused_flood_over_quiet"] = (
        results["refused_flood_legit_p50_ms"] / results["quiet_legit_p50_ms"]
    )
    results["refused_flood_refused"] = sum(r["refused"] for r in flooded["flood"])
    results["refused_flood_received"] = sum(r["received"] for r in flooded["flood"])
    for mode, found in runs.items():
        results[f"latency_p50_ms_{mode}"] = statistics.median(r["p50_ms"] for r in found)
        results[f"received_{mode}"] = sum(r["received"] for r in found)
    results["verified_enforce"] = sum(
        r["verified"] for mode in ("enforce", "enforce_state_file") for r in runs[mode]
    )
    results["enforce_over_off"] = results["latency_p50_ms_enforce"] / results["latency_p50_ms_off"]
    results["enforce_over_off_state_file"] = (
        results["latency_p50_ms_enforce_state_file"] / results["latency_p50_ms_off_state_file"]
    )
    results["survival"] = {k: {"emailmw": v[0], "dkim": v[1]} for k, v in survival.items()}
    results["messages_per_run"] = args.messages
    results["rate_msgs_per_s"] = args.rate
    results["rounds"] = args.rounds

    print(f"{'measure':34} {'value':>12}")
    shown = (
        "sign_us", "verify_us", "sign_plus_verify_us", "decide_us", "dkim_sign_us",
        "dkim_verify_us", "latency_p50_ms_off", "latency_p50_ms_enforce", "enforce_over_off",
        "latency_p50_ms_off_state_file", "latency_p50_ms_enforce_state_file",
        "enforce_over_off_state_file", "routed_off_p50_ms", "routed_enforce_p50_ms",
        "routed_enforce_over_off", "relay_off_p50_ms", "relay_verify_p50_ms",
        "relay_verify_over_off", "quiet_legit_p50_ms", "refused_flood_legit_p50_ms",
        "refused_flood_legit_max_ms", "refused_flood_over_quiet",
    )  # fmt: skip
    for key in shown:
        print(f"{key:34} {results[key]:12.2f}")
    received = " / ".join(str(results[f"received_{mode}"]) for mode in runs)
    print(f"{'received (' + ', '.join(runs) + ')':34} {received}")
    print(f"{'verified (enforce runs)':34} {results['verified_enforce']}")
    print(f"\n{'signature survives':34} {'emailmw':>8} {'DKIM':>8}")
    for case, (ours, theirs) in survival.items():
        print(f"{case:34} {ours!s:>8} {theirs!s:>8}")
    print(f"{'flood: refused / legit received':34} {results['refused_flood_refused']} / "
          f"{results['refused_flood_received']}")  # fmt: skip
    targets = {
        "sign+verify <= 200 us": results["sign_plus_verify_us"] <= 200,
        "enforce p50 <= 1.1x off": results["enforce_over_off"] <= 1.1,
        "routed enforce <= 1.15x off": results["routed_enforce_over_off"] <= 1.15,
        "relay verify <= 1.2x off": results["relay_verify_over_off"] <= 1.2,
        "flood legit p50 <= 3x quiet": results["refused_flood_over_quiet"] <= 3,
    }
    results["targets"] = targets
    print(
        "\ntargets: " + "; ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items())
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
