"""What the real (SMTP/IMAP) transports share: TLS, outgoing preparation, fetched-mail
handling and the resume position (UIDVALIDITY + last UID, optionally in a state file)."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from email.utils import parseaddr
from pathlib import Path

from .._config import Options, TLSOptions
from .._exceptions import MalformedEmailError
from .._log import get_logger
from .._protocol import Unroutable, classify
from .._types import Email
from .._wire import ForeignEmailError, format_date, new_message_id, parse

__all__ = [
    "ResumePosition",
    "envelope_recipients",
    "hand_out",
    "parse_batch",
    "parse_fetched",
    "prepare_outgoing",
    "ssl_context",
]

_log = get_logger("transport")


def ssl_context(tls: TLSOptions) -> ssl.SSLContext:
    """A client context that verifies certificates and host names unless told not to."""
    context = ssl.create_default_context(cafile=tls.ca_file)
    if not tls.verify:
        _log.warning("TLS certificate verification is OFF (tls.verify: false)")
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def prepare_outgoing(email: Email, from_: str) -> Email:
    """Fill what a real email needs and the caller may have left out: From, Message-ID, Date."""
    sender = email.from_ or from_
    headers = email.headers
    if "Date" not in headers:
        headers = headers.merged({"Date": format_date(time.time_ns())})
    return email.replace(
        from_=sender, headers=headers, message_id=email.message_id or new_message_id(sender)
    )


def envelope_recipients(email: Email) -> list[str]:
    """The SMTP RCPT TO addresses: To, Cc and Bcc without display names, deduplicated."""
    seen: dict[str, None] = {}
    for value in (*email.to, *email.cc, *email.bcc):
        address = parseaddr(value)[1] or value
        seen.setdefault(address, None)
    return list(seen)


def parse_fetched(raw: bytes, *, uid: int, where: str, max_size: int) -> Email | None:
    """Parse a fetched message. Mail that is not emailmw's is logged and left alone (None)."""
    try:
        parsed = parse(raw, max_size=max_size)
    except ForeignEmailError as exc:
        _log.info("left alone foreign email UID %d in %s: %s", uid, where, exc)
        return None
    except MalformedEmailError as exc:
        _log.warning("left alone malformed email UID %d in %s: %s", uid, where, exc)
        return None
    if parsed.message_id is None:
        parsed = parsed.with_message_id(f"<uid{uid}.{time.time_ns()}@{where.replace('/', '.')}>")
    return parsed


def parse_batch(
    raw_by_uid: Mapping[int, bytes | None], *, where: str, max_size: int
) -> list[tuple[int, Email]]:
    """Parse fetched messages in UID order; mail that is not emailmw's is left out."""
    parsed: list[tuple[int, Email]] = []
    for uid in sorted(raw_by_uid):
        raw = raw_by_uid[uid]
        if raw is None:
            _log.warning("UID %d in %s: no body in FETCH response", uid, where)
            continue
        email = parse_fetched(raw, uid=uid, where=where, max_size=max_size)
        if email is not None:
            parsed.append((uid, email))
    return parsed


def hand_out(
    raw_by_uid: Mapping[int, bytes | None],
    *,
    position: ResumePosition,
    where: str,
    max_size: int,
    apply_on_receive: Callable[[list[int]], None],
) -> list[Email]:
    """A fetched batch as the emails to return from ``receive()``.

    The resume position is advanced past the whole batch *before* the handlers run (so a
    restart never hands out the same mail twice), then the on-receive action is applied to
    emailmw's own mail only.
    """
    fetched = parse_batch(raw_by_uid, where=where, max_size=max_size)
    if raw_by_uid:
        position.advance(max(raw_by_uid))
        apply_on_receive(ours(fetched))
    return [email for _, email in fetched]


def is_ours(email: Email) -> bool:
    """True when emailmw routes this email (on-receive actions only ever touch those)."""
    return not isinstance(classify(email, 0), Unroutable)


def ours(emails: Iterable[tuple[int, Email]]) -> list[int]:
    return [uid for uid, e in emails if is_ours(e)]


class ResumePosition:
    """Where a receiver continues: the next UID of one folder of one account.

    Without a state file a receiver starts at UIDNEXT (only mail that arrives after it
    starts, as rmw_email). With one, the last handled UID and UIDVALIDITY are written
    atomically after every batch, so a restarted receiver gets exactly what it missed; a
    changed UIDVALIDITY (the mailbox was recreated) is logged and the folder is read again
    from the start.
    """

    def __init__(self, options: Options, account: str) -> None:
        self._path = Path(options.state_file) if options.state_file else None
        self._key = {"account": account, "folder": options.folder}
        self.uidvalidity: int | None = None
        self.next_uid: int | None = None

    def _load(self) -> dict[str, int] | None:
        if self._path is None:
            return None
        try:
            data = json.loads(self._path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            _log.warning("state file %s unreadable (%s): starting at new mail", self._path, exc)
            return None
        if any(data.get(k) != v for k, v in self._key.items()):
            _log.warning(
                "state file %s belongs to %s/%s: starting at new mail",
                self._path,
                data.get("account"),
                data.get("folder"),
            )
            return None
        return {"uidvalidity": int(data["uidvalidity"]), "last_uid": int(data["last_uid"])}

    def start(self, uidvalidity: int, uidnext: int) -> int:
        """The first UID to fetch after (re)selecting a folder with these values."""
        if self.uidvalidity == uidvalidity and self.next_uid is not None:
            return self.next_uid  # reconnect: resume exactly where we were
        if self.uidvalidity is not None:
            _log.warning(
                "UIDVALIDITY changed (%d -> %d): reading the folder from the start",
                self.uidvalidity,
                uidvalidity,
            )
            self._set(uidvalidity, 1)
            return 1
        saved = self._load()
        if saved is None:
            self._set(uidvalidity, uidnext)
        elif saved["uidvalidity"] != uidvalidity:
            _log.warning(
                "UIDVALIDITY changed since the state file was written (%d -> %d): "
                "reading the folder from the start",
                saved["uidvalidity"],
                uidvalidity,
            )
            self._set(uidvalidity, 1)
        else:
            self._set(uidvalidity, saved["last_uid"] + 1)
        assert self.next_uid is not None
        return self.next_uid

    def advance(self, last_uid: int) -> None:
        """Everything up to ``last_uid`` has been handed out."""
        assert self.uidvalidity is not None
        if self.next_uid is None or last_uid >= self.next_uid:
            self._set(self.uidvalidity, last_uid + 1)

    def _set(self, uidvalidity: int, next_uid: int) -> None:
        self.uidvalidity, self.next_uid = uidvalidity, next_uid
        if self._path is None:
            return
        data = {**self._key, "uidvalidity": uidvalidity, "last_uid": next_uid - 1}
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self._path.parent, prefix=f".{self._path.name}.")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(data, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self._path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
