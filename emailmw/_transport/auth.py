"""Logging in to the account's servers the way its configuration says (``user.auth``): a
password (SASL PLAIN/LOGIN), or an OAuth2 access token (SASL XOAUTH2 or OAUTHBEARER,
RFC 7628), for every backend: imapclient, aiosmtplib and libcurl.

Each login takes the credential's current secret (fetched anew ahead of its expiry) and,
when the server refuses it, asks the credential once for a fresh one and tries once more:
a token that expired between two connections costs one extra round trip, never an error.
A second refusal is the user's to fix (the error says so).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

import aiosmtplib
import imapclient
import imapclient.exceptions

from .._core.config import UserInfo
from .errors import connection_limit

if TYPE_CHECKING:
    import pycurl

__all__ = ["curl_login_options", "imap_login", "smtp_login"]


def _gs2(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _imap_auth(client: imapclient.IMAPClient, user: UserInfo, secret: str) -> None:
    if user.mechanism == "xoauth2":
        client.oauth2_login(user.username, secret)
    elif user.mechanism == "oauthbearer":
        client.oauthbearer_login(user.username, secret)
    else:
        client.login(user.username, secret)


def imap_login(client: imapclient.IMAPClient, user: UserInfo) -> None:
    """Log ``client`` in as ``user``; after a refusal, once more with a fresh secret when
    the credential has one. Raises imapclient's ``LoginError`` (translated by the caller's
    ``imap_errors``)."""
    secret = user.secret()
    try:
        _imap_auth(client, user, secret)
    except imapclient.exceptions.LoginError as exc:
        if connection_limit(str(exc)):
            raise  # (not the secret: a fresh one would be refused the same way)
        fresh = user.refresh(secret)
        if fresh is None:
            raise
        _imap_auth(client, user, fresh)


async def _smtp_oauthbearer(smtp: aiosmtplib.SMTP, username: str, token: str) -> None:
    """SASL OAUTHBEARER (RFC 7628), which aiosmtplib does not implement: on a refusal the
    server sends an error challenge, answered with ``%x01`` to get the final reply."""
    payload = f"n,a={_gs2(username)},\1auth=Bearer {token}\1\1"
    response = await smtp.execute_command(
        b"AUTH", b"OAUTHBEARER", base64.b64encode(payload.encode())
    )
    if response.code == 334:
        response = await smtp.execute_command(base64.b64encode(b"\1"))
    if response.code != 235:
        raise aiosmtplib.SMTPAuthenticationError(response.code, response.message)


async def _smtp_auth(smtp: aiosmtplib.SMTP, user: UserInfo, secret: str) -> None:
    if user.mechanism == "xoauth2":
        await smtp.auth_xoauth2(user.username, secret)
    elif user.mechanism == "oauthbearer":
        await _smtp_oauthbearer(smtp, user.username, secret)
    else:
        await smtp.login(user.username, secret)


async def smtp_login(smtp: aiosmtplib.SMTP, user: UserInfo) -> None:
    """Log the connected ``smtp`` in as ``user``; after a refusal, once more with a fresh
    secret when the credential has one. Raises aiosmtplib's errors (translated by the
    caller's ``smtp_login_errors``)."""
    secret = user.secret()
    try:
        await _smtp_auth(smtp, user, secret)
    except aiosmtplib.SMTPAuthenticationError:
        fresh = user.refresh(secret)
        if fresh is None:
            raise
        await _smtp_auth(smtp, user, fresh)


def curl_login_options(handle: pycurl.Curl, user: UserInfo, secret: str) -> None:
    """Set ``handle``'s login to ``user`` with ``secret`` (libcurl logs in when it opens a
    connection: a new secret applies to the next one)."""
    import pycurl

    handle.setopt(pycurl.USERNAME, user.username)
    if user.mechanism == "password":
        handle.setopt(pycurl.PASSWORD, secret)
        return
    handle.setopt(pycurl.XOAUTH2_BEARER, secret)
    handle.setopt(pycurl.LOGIN_OPTIONS, f"AUTH={user.mechanism.upper()}")
