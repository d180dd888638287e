"""A live IMAP folder as a pipeline source: fetched into a local staging Maildir.

``imaps://user@host:port/FOLDER`` (or ``imap://``, STARTTLS required). The password and TLS
settings come from the emailmw configuration when its account matches (``--config`` or
``EMAILMW_CONFIG_FILE``), else from ``EMAILMW_IMAP_PASSWORD``. Re-runs are incremental:
the staging directory remembers UIDVALIDITY and the last UID fetched, and a changed
UIDVALIDITY starts the staging copy afresh. Mail is read with ``BODY.PEEK[]``: nothing on the
server changes.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

import imapclient
import imapclient.exceptions

from .._config import Options, TLSOptions, load_options
from .._exceptions import AuthenticationError, ConfigError, ReceiveError
from .._transport.common import ssl_context

__all__ = ["stage_imap_folder"]

_BATCH = 500


def _account(url: str, config: str | None) -> tuple[str, int, str, str, str, TLSOptions, bool]:
    parts = urlsplit(url)
    if parts.scheme not in ("imap", "imaps") or not parts.hostname or not parts.username:
        raise ConfigError("expected imap[s]://user@host[:port]/FOLDER", source=url)
    user = unquote(parts.username)
    folder = unquote(parts.path.lstrip("/")) or "INBOX"
    implicit = parts.scheme == "imaps"
    port = parts.port or (993 if implicit else 143)
    tls = TLSOptions()
    password = os.environ.get("EMAILMW_IMAP_PASSWORD")
    options: Options | None = None
    if config or os.environ.get("EMAILMW_CONFIG_FILE") or os.environ.get("EMAIL_CONFIG_FILE"):
        options = load_options(config)
    if options is not None and options.user is not None and options.user.username == user:
        password = password or options.user.password
        tls = options.tls
    if not password:
        raise ConfigError(
            f"no password for {user}: give a config whose user.username is {user} "
            "(--config or EMAILMW_CONFIG_FILE), or set EMAILMW_IMAP_PASSWORD",
            source=url,
        )
    return parts.hostname, port, user, password, folder, tls, implicit


def stage_imap_folder(
    url: str,
    staging_root: Path,
    *,
    config: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Fetch what is new in the folder into a Maildir under ``staging_root``; return it."""
    host, port, user, password, folder, tls, implicit = _account(url, config)
    staging = staging_root / f"{host}_{port}" / user / folder.replace("/", "_")
    state_path = staging / "emailmw-staging.json"
    server = f"{'imaps' if implicit else 'imap'}://{host}:{port}"
    context = ssl_context(tls, server)
    try:
        client = imapclient.IMAPClient(
            host, port=port, ssl=implicit, ssl_context=context if implicit else None, timeout=60
        )
        if not implicit and tls.starttls:
            client.starttls(context)
        client.login(user, password)
    except imapclient.exceptions.LoginError as exc:
        raise AuthenticationError(f"login as {user} refused", server=server) from exc
    except (imapclient.exceptions.IMAPClientError, OSError) as exc:
        raise ReceiveError(f"cannot connect: {exc}", server=server) from exc
    with client:
        info = client.select_folder(folder, readonly=True)
        uidvalidity = int(info[b"UIDVALIDITY"])
        state = json.loads(state_path.read_text()) if state_path.exists() else {}
        if state.get("uidvalidity") != uidvalidity:
            shutil.rmtree(staging, ignore_errors=True)
            state = {"uidvalidity": uidvalidity, "last_uid": 0}
        for sub in ("cur", "new", "tmp"):
            (staging / sub).mkdir(parents=True, exist_ok=True)
        uids = [
            u for u in client.search(["UID", f"{state['last_uid'] + 1}:*"]) if u > state["last_uid"]
        ]
        for start in range(0, len(uids), _BATCH):
            batch = uids[start : start + _BATCH]
            for uid, data in client.fetch(batch, ["BODY.PEEK[]"]).items():
                raw = data.get(b"BODY[]")
                if isinstance(raw, bytes):
                    name = f"{uidvalidity}.{uid:012d}:2,"
                    tmp = staging / "tmp" / name
                    tmp.write_bytes(raw)
                    os.replace(tmp, staging / "cur" / name)
            state["last_uid"] = max(batch)
            state_path.write_text(json.dumps(state))
            if progress is not None:
                progress(start + len(batch), len(uids))
    return staging
