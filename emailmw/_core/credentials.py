"""Where a login's secret comes from: a password in the configuration, a command that
prints one (``password-command:``, for an app password in a keyring), or an OAuth2 access
token (``token-command:``, or a refresh token exchanged at the provider's token endpoint).

A :class:`Credential` hands the transports the secret to log in with, fetches a new one
before the current one expires, and once more when the server refused it
(:meth:`Credential.refresh`). Every secret it fetches is registered for redaction before
anyone can log it, with the forms SASL puts on the wire (base64 of PLAIN, XOAUTH2 and
OAUTHBEARER). Thread-safe: the transports of one context log in from several threads.
"""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from .errors import AuthenticationError
from .log import get_logger, redact, register_secret

__all__ = [
    "MECHANISMS",
    "Credential",
    "Mechanism",
    "command_secret",
    "jwt_expiry",
    "permanent_failure",
    "refresh_token_secret",
    "sasl_forms",
]

_log = get_logger("credentials")

Mechanism = Literal["password", "xoauth2", "oauthbearer"]
#: the ``auth:`` values: a password login (SASL PLAIN/LOGIN), or an OAuth2 bearer token
MECHANISMS: Final[dict[str, Mechanism]] = {
    "password": "password",
    "oauth2": "xoauth2",
    "xoauth2": "xoauth2",
    "oauthbearer": "oauthbearer",
}
#: a secret is fetched anew this long before it expires (at most a quarter of its life)
REFRESH_MARGIN_S: Final = 60.0
_COMMAND_TIMEOUT_S: Final = 60.0
#: after a failed fetch the source is not asked again for this long, doubling with each
#: failure: from 1 s to 5 minutes; a failure that says it is permanent (a revoked grant:
#: ``invalid_grant``; a command's exit status 77 or 78) from 1 minute to 30 minutes
RETRY_MIN_S: Final = 1.0
RETRY_MAX_S: Final = 300.0
PERMANENT_RETRY_MIN_S: Final = 60.0
PERMANENT_RETRY_MAX_S: Final = 1800.0
#: the exit statuses of a secret command that say its failure is permanent (sysexits.h's
#: EX_NOPERM and EX_CONFIG: the grant was revoked, the command is misconfigured)
PERMANENT_EXIT_STATUSES: Final = (77, 78)

#: what a fetch returns: the secret and when it expires (``time.time()``), None: unknown
Fetched = tuple[str, float | None]


def sasl_forms(username: str, secret: str) -> list[str]:
    """``secret`` as SASL puts it on the wire, base64: PLAIN with and without an
    authorization identity, LOGIN's lone password, XOAUTH2 and OAUTHBEARER (what log lines
    must redact, whichever library writes them)."""
    gs2 = username.replace("=", "=3D").replace(",", "=2C")
    forms = (
        f"\0{username}\0{secret}",
        f"{username}\0{username}\0{secret}",
        secret,
        f"user={username}\1auth=Bearer {secret}\1\1",
        f"n,a={gs2},\1auth=Bearer {secret}\1\1",
    )
    return [base64.b64encode(form.encode()).decode("ascii") for form in forms]


def jwt_expiry(token: str) -> float | None:
    """When an access token that is a JWT expires (its ``exp`` claim, not verified: only
    to know when to fetch the next one); None for a token that is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


@dataclass(frozen=True, slots=True)
class _Source:
    fetch: Callable[[], Fetched]
    describe: str
    refreshable: bool


class Credential:
    """The secret an account logs in with (``mechanism``: a password, or an OAuth2 token
    for XOAUTH2 or OAUTHBEARER), fetched when first needed and again ahead of its expiry.
    Never shows the secret in ``repr()``. Thread-safe."""

    __slots__ = (
        "_clock", "_expires", "_failed", "_failures", "_lock", "_refresh_at", "_retry_at",
        "_source", "_username", "_value", "mechanism",
    )  # fmt: skip

    def __init__(
        self,
        source: _Source,
        mechanism: Mechanism,
        username: str,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.mechanism: Mechanism = mechanism
        self._source = source
        self._username = username
        self._lock = threading.Lock()
        self._value: str | None = None
        self._refresh_at: float | None = None
        self._expires: float | None = None
        self._clock = clock or _now
        # the last failure of the source and when it may be asked again (see _fetch)
        self._failed: AuthenticationError | None = None
        self._failures = 0
        self._retry_at = 0.0

    @classmethod
    def password(cls, password: str, username: str) -> Credential:
        """A password written in the configuration (never fetched again)."""
        register_secret(password)
        for form in sasl_forms(username, password):
            register_secret(form)
        credential = cls(_Source(lambda: (password, None), "password", False), "password", username)
        credential._value = password
        return credential

    @classmethod
    def fetched(
        cls,
        fetch: Callable[[], Fetched],
        mechanism: Mechanism,
        username: str,
        *,
        describe: str,
        clock: Callable[[], float] | None = None,
    ) -> Credential:
        """A secret ``fetch`` returns (with its expiry, if known), fetched when first
        needed, ahead of its expiry and after a refused login. ``describe`` names the
        source in errors (``token-command``).

        A fetch that fails is not tried again at once: for 1 s, doubling with each failure
        up to 5 minutes (a failure that says it is permanent, :func:`permanent_failure`:
        from 1 minute up to 30); meanwhile the last failure is raised again without asking
        the source, and a secret still valid is used. The first failure is logged once (a
        warning; an error when permanent), and once more when the source works again."""
        return cls(_Source(fetch, describe, True), mechanism, username, clock)

    def __repr__(self) -> str:
        return f"Credential({self.mechanism}, from {self._source.describe})"

    @property
    def refreshable(self) -> bool:
        return self._source.refreshable

    def secret(self) -> str:
        """The secret to log in with now: fetched when there is none yet or the current one
        expires within the margin. Raises :class:`AuthenticationError` (one line, naming
        the source) when fetching fails."""
        with self._lock:
            if self._value is None or self._expiring():
                self._fetch()
            assert self._value is not None
            return self._value

    def refresh(self, refused: str) -> str | None:
        """After the server refused ``refused``: a new secret to try once more, or None when
        there is none (a fixed password; the source gave the same one again). Another
        thread's refresh since counts: its secret is returned without fetching again."""
        with self._lock:
            if self._value is not None and self._value != refused:
                return self._value
            if not self._source.refreshable:
                return None
            self._fetch()
            return self._value if self._value != refused else None

    def _expiring(self) -> bool:
        return self._refresh_at is not None and self._clock() >= self._refresh_at

    def _fetch(self) -> None:
        now = self._clock()
        if self._failed is not None and now < self._retry_at:
            if self._still_valid(now):
                return  # (the secret in hand lasts a while yet)
            # (the same words: whoever retries sees the same failure, no news)
            raise AuthenticationError(str(self._failed)) from self._failed
        try:
            value, expires = self._source.fetch()
            value = value.strip()
            if not value:
                raise AuthenticationError(f"{self._source.describe} gave an empty secret")
        except AuthenticationError as exc:
            self._failures += 1
            permanent = permanent_failure(exc)
            low, high = (
                (PERMANENT_RETRY_MIN_S, PERMANENT_RETRY_MAX_S)
                if permanent
                else (RETRY_MIN_S, RETRY_MAX_S)
            )
            wait = min(low * 2 ** (self._failures - 1), high)
            self._retry_at = now + wait
            if self._failed is None:  # (a change of state: said once)
                _log.log(
                    logging.ERROR if permanent else logging.WARNING,
                    "%s: %s; asked again in %.0f s, then less often (up to %.0f s); said "
                    "again once it works",
                    self._source.describe, exc, wait, high,
                )  # fmt: skip
            self._failed = exc
            if self._still_valid(now):
                return
            raise
        if self._failed is not None:
            _log.warning("%s works again", self._source.describe)
            self._failed, self._failures = None, 0
        register_secret(value)
        for form in sasl_forms(self._username, value):
            register_secret(form)
        refresh_at = None
        if expires is not None:
            # the margin before expiry, or a quarter of a short life
            refresh_at = expires - min(REFRESH_MARGIN_S, max(0.0, expires - now) / 4)
        self._value, self._refresh_at, self._expires = value, refresh_at, expires
        _log.debug("fetched a new secret from %s", self._source.describe)

    def _still_valid(self, now: float) -> bool:
        """Whether the secret in hand may still log in (fetched, not expired yet)."""
        return self._value is not None and self._expires is not None and now < self._expires


def _now() -> float:
    return time.time()  # (looked up at each call: tests replace it)


def permanent_failure(error: BaseException) -> bool:
    """Whether a failed fetch says it will not work until something changes: the token
    endpoint's ``invalid_grant`` (a refresh token revoked or expired, RFC 6749 5.2), or
    a command's exit status 77 or 78 (:data:`PERMANENT_EXIT_STATUSES`)."""
    text = str(error)
    return "invalid_grant" in text or any(
        f"(exit status {code})" in text for code in PERMANENT_EXIT_STATUSES
    )


def command_secret(command: str, key: str) -> Callable[[], Fetched]:
    """A fetch that runs ``command`` in the shell (as msmtp's ``passwordeval`` and isync's
    ``PassCmd`` do) and takes the first line it prints; a JWT's expiry is read from it.
    A command that fails raises :class:`AuthenticationError` naming ``key`` and its exit
    status and first line of stderr (redacted), never its output."""

    def fetch() -> Fetched:
        try:
            done = subprocess.run(  # noqa: S602 - the user's own command, as msmtp runs it
                command,
                shell=True,
                capture_output=True,
                text=True,
                timeout=_COMMAND_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise AuthenticationError(
                f"{key} did not finish in {_COMMAND_TIMEOUT_S:.0f} s; run it yourself to see why"
            ) from exc
        except OSError as exc:
            raise AuthenticationError(f"{key} could not be run: {exc.strerror}") from exc
        lines = done.stdout.splitlines()
        if done.returncode or not lines or not lines[0].strip():
            said = next((ln.strip() for ln in done.stderr.splitlines() if ln.strip()), "")
            why = f"exit status {done.returncode}" if done.returncode else "printed nothing"
            tail = f": {redact(said)[:200]}" if said else ""
            raise AuthenticationError(f"{key} failed ({why}){tail}; run it yourself to see why")
        value = lines[0].strip()
        return value, jwt_expiry(value)

    return fetch


def refresh_token_secret(
    token_url: str,
    client_id: str,
    client_secret: str | None,
    refresh_token: str,
    scope: str | None,
    *,
    timeout: float,
    ca_file: str | None,
) -> Callable[[], Fetched]:
    """A fetch that exchanges the refresh token for an access token at the provider's
    token endpoint (RFC 6749 section 6, through authlib), keeping a rotated refresh token
    the provider returns. Errors are :class:`AuthenticationError`, without the tokens."""
    state = {"refresh_token": refresh_token}

    def fetch() -> Fetched:
        try:
            from authlib.integrations.requests_client import OAuth2Session
        except ImportError as exc:
            raise AuthenticationError(
                "the oauth2 refresh-token login needs authlib and requests: "
                "pip install 'emailmw[oauth2]'"
            ) from exc
        session = OAuth2Session(client_id, client_secret, scope=scope)
        try:
            # (verify per request: requests lets REQUESTS_CA_BUNDLE override the session's)
            token = session.refresh_token(
                token_url,
                refresh_token=state["refresh_token"],
                timeout=timeout,
                verify=ca_file if ca_file else True,
            )
        except Exception as exc:  # authlib's and requests' errors, translated
            raise AuthenticationError(
                f"the token endpoint {token_url} refused the refresh token or could not "
                f"be reached: {redact(str(exc))[:200]}"
            ) from exc
        finally:
            session.close()
        access = token.get("access_token")
        if not isinstance(access, str) or not access:
            raise AuthenticationError(f"the token endpoint {token_url} returned no access_token")
        rotated = token.get("refresh_token")
        if isinstance(rotated, str) and rotated:
            register_secret(rotated)
            state["refresh_token"] = rotated
        expires = token.get("expires_at")
        return access, float(expires) if isinstance(expires, int | float) else jwt_expiry(access)

    return fetch
