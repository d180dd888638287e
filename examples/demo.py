"""The emailmw demo: a talker, a listener and an add-two-ints service exchanging real email.

Four separate node processes (the examples talker.py, listener.py, add_two_ints_server.py,
add_two_ints_client.py) talk through a mail server; while they run, the command line is
used against them (``emailmw topic echo``, ``emailmw service call``, ``emailmw node list``);
then the traffic report is made from the mailboxes.

Which mail server: the account in EMAILMW_CONFIG_FILE when set (every process uses it, so its
recipients should include itself); else a local Postfix + Dovecot started here (needs root
and Debian's packages, installed when missing); else the intraprocess transport, all four
roles in one process, and a line saying why (its traffic is then recorded to an mbox, so
the report still has an archive to read).

The report: `emailmw analyze` over the mailboxes (the local server's Maildirs, or the
configured account's INBOX over IMAP), tables and report.html in OUT/report.

    python examples/demo.py [--out demo-out]
"""

from __future__ import annotations

import argparse
import email.utils as email_utils
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

import emailmw

HERE = Path(__file__).resolve().parent
MESSAGES, CALLS = 10, 3


def log(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def start_local_server() -> tuple[object | None, str]:
    if os.geteuid() != 0:
        return None, "not running as root, so the local Postfix + Dovecot cannot be started"
    from emailmw.testing.mailserver import MailServer, MailServerError

    server = MailServer(state_dir=Path("/tmp/emailmw-demomail"))  # on ports free at start
    try:
        log("starting the local mail server (Postfix + Dovecot on 127.0.0.1) ...")
        server.start(fresh=True)
    except MailServerError as exc:
        return None, f"the local mail server did not start: {str(exc).splitlines()[0]}"
    return server, ""


class Role:
    def __init__(self, name: str, script: str, config: Path, count: int) -> None:
        self.name = name
        self.ready = threading.Event()
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(HERE / script),
                "--config",
                str(config),
                "--timeout",
                "60",
                "--count",
                str(count),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=HERE,
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip() == "ready":
                self.ready.set()
            else:
                print(f"  {self.name:>9} | {line.rstrip()}", flush=True)
        self.ready.set()

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return -1


def cli(config: Path, *args: str, until: str | None = None, timeout: float = 60) -> int:
    """Run ``emailmw ARGS`` against the running demo and show what it prints. ``until``:
    run it again (for up to ``timeout`` seconds) until its output holds that text (what it
    reads may not have arrived yet: a node's announcement is an email); failed without it."""
    log(f"$ emailmw {' '.join(args)}")
    deadline = time.monotonic() + timeout
    while True:
        result = subprocess.run(
            [sys.executable, "-m", "emailmw", "--config", str(config), *args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if until is None or until in result.stdout or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for line in (result.stdout + result.stderr).splitlines():
        print(f"        cli | {line}", flush=True)
    return result.returncode if until is None or until in result.stdout else 1


def run_processes(configs: dict[str, Path]) -> bool:
    listener = Role("listener", "listener.py", configs["listener"], MESSAGES)
    server = Role("server", "add_two_ints_server.py", configs["server"], CALLS + 1)
    for role in (listener, server):
        if not role.ready.wait(180):
            log(f"{role.name} did not start within 180 s")
    # the listener lives until it heard the talker's messages: listed before they come
    cli_codes = [cli(configs["listener"], "node", "list", until="/listener")]
    talker = Role("talker", "talker.py", configs["talker"], MESSAGES)
    client = Role("client", "add_two_ints_client.py", configs["client"], CALLS)
    cli_codes += [
        cli(configs["listener"], "topic", "echo", "/chatter", "--once"),
        cli(
            configs["client"],
            "service",
            "call",
            "/add_two_ints",
            "example_interfaces/srv/AddTwoInts",
            "{a: 20, b: 22}",
        ),
    ]
    codes = {role.name: role.wait(180) for role in (talker, client, listener, server)}
    codes |= {f"cli {i}": code for i, code in enumerate(cli_codes)}
    failed = {name: code for name, code in codes.items() if code != 0}
    if failed:
        log(f"FAILED: {failed}")
    return not failed


class RecordingReceiver(emailmw.EmailReceiver):
    """Wraps a receiver and appends every email it returns to an mbox: a recording."""

    def __init__(self, inner: emailmw.EmailReceiver, mbox: Path) -> None:
        self._inner = inner
        self._mbox = open(mbox, "ab")  # noqa: SIM115 - closed in close()

    def receive(self, timeout: float | None = None) -> list[emailmw.Email]:
        emails = self._inner.receive(timeout)
        for email in emails:
            now = email_utils.formatdate(time.time(), usegmt=True)
            stamped = email.replace(
                headers=email.headers.merged({"Received": f"by intraprocess; {now}"})
            )
            raw = emailmw.build_email(stamped).replace(b"\r\n", b"\n")
            self._mbox.write(f"From emailmw {now}\n".encode() + raw + b"\n")
        self._mbox.flush()
        return emails

    def wakeup(self) -> None:
        self._inner.wakeup()

    def close(self) -> None:
        self._inner.close()
        self._mbox.close()


def run_intraprocess(recording: Path) -> bool:
    sender, receiver = emailmw.intraprocess_pair()
    recorder = RecordingReceiver(receiver, recording)
    with emailmw.Context({"intraprocess": True}, sender=sender, receiver=recorder) as ctx:
        sub = emailmw.Subscription("/chatter", context=ctx)
        emailmw.ServiceServer(
            "/add_two_ints", lambda r: str(sum(int(x) for x in r.split())), context=ctx
        )
        pub = emailmw.Publisher("/chatter", context=ctx)
        client = emailmw.ServiceClient("/add_two_ints", context=ctx)
        for i in range(MESSAGES):
            pub.publish(f"data: 'Hello, world! {i}'")
            got = emailmw.wait_for_message_with_info(sub, 5)
            assert got is not None
            print(f"   listener | got: {got[0]} (seq {got[1].sequence_number})", flush=True)
        for i in range(CALLS):
            print(
                f"     client | {i} + {i + 1} = {client.call(f'{i} {i + 1}', timeout=5)}",
                flush=True,
            )
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("demo-out"))
    parser.add_argument(
        "--intraprocess",
        action="store_true",
        help="skip the mail server (what happens where none can be had)",
    )
    args = parser.parse_args()
    out = args.out.resolve()
    (out / "configs").mkdir(parents=True, exist_ok=True)

    configs: dict[str, Path] = {}
    archive: str | None = None
    server = None
    if args.intraprocess:
        log("no mail server: --intraprocess was given; running on the intraprocess transport")
    elif os.environ.get("EMAILMW_CONFIG_FILE"):
        path = Path(os.environ["EMAILMW_CONFIG_FILE"])
        log(f"using the mail account configured in {path}")
        configs = dict.fromkeys(("listener", "server", "talker", "client"), path)
        options = emailmw.Options()
        try:
            from emailmw._core.config import load_options

            options = load_options(path)
        except emailmw.ConfigError as exc:
            log(f"cannot read {path}: {exc}")
        if options.user is not None:
            imap = options.user.imap
            archive = f"{imap.scheme}://{options.user.username}@{imap.host}:{imap.port}/INBOX"
    else:
        server, why = start_local_server()
        if server is None:
            log(f"no mail server: {why}; running on the intraprocess transport instead")
    if server is not None:
        from emailmw.testing.mailserver import MailServer

        assert isinstance(server, MailServer)
        accounts = {"listener": "bob", "server": "robot", "talker": "alice", "client": "alice"}
        targets = {"talker": "bob", "client": "robot"}
        for role, user in accounts.items():
            to = server.address(targets.get(role, user))
            config = server.config(server.address(user), to=to)
            configs[role] = out / "configs" / f"{role}.yml"
            configs[role].write_text(yaml.safe_dump({"email": config}, sort_keys=False))
        archive = str(server.state_dir / "mail")
        log("talker (alice) -> listener (bob) on /chatter; client (alice) -> server (robot)")

    recording = out / "intraprocess-recording.mbox"
    try:
        if configs:
            ok = run_processes(configs)
        else:
            recording.unlink(missing_ok=True)
            ok = run_intraprocess(recording)
            archive = str(recording)
        if ok:
            log(f"all messages and calls went through; the traffic is in {archive}")
    finally:
        if server is not None:
            server.stop()  # type: ignore[attr-defined]
    if ok and archive is not None:
        ok = report(archive, out / "report", configs.get("listener"))
    log("done" if ok else "failed")
    return 0 if ok else 1


def report(archive: str, out: Path, config: Path | None) -> bool:
    """The Spark traffic report over the archive (``emailmw analyze``)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        log("PySpark is not installed (pip install 'emailmw[spark]'): no report")
        return True
    log(f"traffic report: emailmw analyze {archive} --out {out}")
    command = [
        sys.executable,
        "-m",
        "emailmw",
        "analyze",
        archive,
        "--out",
        str(out),
        "--conf",
        "spark.driver.memory=1g",
    ]
    if config is not None:
        command[3:3] = ["--config", str(config)]
    result = subprocess.run(command, text=True, capture_output=True, check=False)
    for line in result.stdout.splitlines():
        print(f"     report | {line}", flush=True)
    if result.returncode != 0:
        log(f"the report failed: {result.stderr.strip().splitlines()[-1:]}")
        return False
    log(f"open {out / 'report.html'} in a browser")
    return True


if __name__ == "__main__":
    sys.exit(main())
