"""A live IMAP folder as a pipeline source: fetched into a local staging Maildir.

``imaps://user@host:port/FOLDER`` (or ``imap://``, STARTTLS required). The password and TLS
settings come from the emailmw configuration when its account matches (``--config`` or
``EMAILMW_CONFIG_FILE``), else from ``EMAILMW_IMAP_PASSWORD``. Re-runs are incremental:
the staging directory keeps the folder's position (a :class:`ResumePosition`, as a receiver
with a ``state-file`` does), and a changed UIDVALIDITY starts the staging copy afresh. The
connection, its login and its errors are the native receiver's. Mail is read with
``BODY.PEEK[]``: nothing on the server changes.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .._core.config import Endpoint, Options, TLSOptions, UserInfo, load_options
from .._core.errors import ConfigError
from .._core.log import register_secret
from .._transport.common import ResumePosition, ssl_context
from .._transport.errors import imap_errors
from .._transport.imap import open_imap_folder

__all__ = ["stage_imap_folder"]

_BATCH = 500


def _account(url: str, config: str | None) -> tuple[UserInfo, str, TLSOptions]:
    """The account of ``url`` (``imap[s]://user@host[:port]/FOLDER``), its folder and TLS
    options: logged in with ``EMAILMW_IMAP_PASSWORD``, else as the configuration's
    ``user:`` says when its username is the URL's (password, command or OAuth2)."""
    parts = urlsplit(url)
    if parts.scheme not in ("imap", "imaps") or not parts.hostname or not parts.username:
        raise ConfigError("expected imap[s]://user@host[:port]/FOLDER", source=url)
    user = unquote(parts.username)
    folder = unquote(parts.path.lstrip("/")) or "INBOX"
    implicit = parts.scheme == "imaps"
    endpoint = Endpoint(parts.scheme, parts.hostname, parts.port or (993 if implicit else 143))
    tls = TLSOptions()
    password = os.environ.get("EMAILMW_IMAP_PASSWORD")
    options: Options | None = None
    if config or os.environ.get("EMAILMW_CONFIG_FILE") or os.environ.get("EMAIL_CONFIG_FILE"):
        options = load_options(config)
    mine: UserInfo | None = None
    if options is not None and options.user is not None and options.user.username == user:
        mine, tls = options.user, options.tls
    if password:
        register_secret(password)
        return UserInfo(endpoint, endpoint, user, password), folder, tls
    if mine is not None:
        return dataclasses.replace(mine, smtp=endpoint, imap=endpoint), folder, tls
    raise ConfigError(
        f"no password for {user}: give a config whose user.username is {user} "
        "(--config or EMAILMW_CONFIG_FILE), or set EMAILMW_IMAP_PASSWORD",
        source=url,
    )


def stage_imap_folder(
    url: str,
    staging_root: Path,
    *,
    config: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Fetch what is new in the folder into a Maildir under ``staging_root``; return it.
    Raises a :class:`~emailmw.TransportError` (:class:`~emailmw.AuthenticationError`,
    :class:`~emailmw.ConnectError`, ...) when the folder cannot be read."""
    account, folder, tls = _account(url, config)
    endpoint, user = account.imap, account.username
    staging = staging_root / f"{endpoint.host}_{endpoint.port}" / user / folder.replace("/", "_")
    server = endpoint.url
    position = ResumePosition(
        dataclasses.replace(
            Options(), folder=folder, state_file=str(staging / "emailmw-staging.json")
        ),
        user,
        from_start=True,
    )
    with imap_errors(server, "connecting", username=user, connected=False):
        client, info = open_imap_folder(
            endpoint, account, context=ssl_context(tls, server),
            starttls=tls.starttls, timeout=60, folder=folder, readonly=True,
        )  # fmt: skip
    with client, imap_errors(server, "staging", username=user, connected=True):
        uidvalidity = int(info[b"UIDVALIDITY"])
        position.start(uidvalidity, int(info[b"UIDNEXT"]))
        assert position.next_uid is not None
        if position.next_uid == 1:  # the folder is read from its start: no copy of before
            shutil.rmtree(staging / "cur", ignore_errors=True)
        for sub in ("cur", "new", "tmp"):
            (staging / sub).mkdir(parents=True, exist_ok=True)
        first = position.next_uid
        uids = [u for u in client.search(["UID", f"{first}:*"]) if u >= first]
        for start in range(0, len(uids), _BATCH):
            batch = uids[start : start + _BATCH]
            for uid, data in client.fetch(batch, ["BODY.PEEK[]"]).items():
                raw = data.get(b"BODY[]")
                if isinstance(raw, bytes):
                    name = f"{uidvalidity}.{uid:012d}:2,"
                    tmp = staging / "tmp" / name
                    tmp.write_bytes(raw)
                    os.replace(tmp, staging / "cur" / name)
            position.handing_out((), settled=batch)  # on disk: staged for good
            if progress is not None:
                progress(start + len(batch), len(uids))
    return staging
