"""Provider profiles (``email.provider:``): what a mail provider's accounts need, filled in
for the keys a configuration leaves out (every value stays overridable): the servers, the
way to log in, and the sending limits the provider publishes (``docs/providers.md`` says
where each comes from; providers change them without notice)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["PROVIDERS", "Provider", "filled_in", "with_profile"]


@dataclass(frozen=True, slots=True)
class Provider:
    """One provider: its ``user:`` defaults (servers, ``auth``) and ``limits:``."""

    name: str
    user: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)
    #: what logging in needs, for errors and the docs
    login: str = ""
    #: what ``on-receive: delete`` does there instead, when a plain delete does not delete
    delete: str | None = None


def _gmail(name: str, per_day: int) -> Provider:
    """Gmail, a consumer account or Workspace's: the same servers and login, the day's
    sending budget differs."""
    return Provider(
        name,
        {"url-smtp": "smtps://smtp.gmail.com:465", "url-imap": "imaps://imap.gmail.com:993"},
        {"emails-per-day": per_day, "recipients-per-email": 100, "max-connections": 15},
        "OAuth2 (auth: oauthbearer or oauth2), or an app password (2-step verification)",
        # an EXPUNGE from INBOX only archives (the mail stays in All Mail): delete = Trash
        delete="move:\\Trash",
    )


PROVIDERS: Final[dict[str, Provider]] = {
    p.name: p
    for p in (
        _gmail("gmail", 500),
        _gmail("gmail-workspace", 2000),
        # Outlook.com (a personal Microsoft account: outlook.com, hotmail.com, live.com)
        # and Exchange Online (Microsoft 365 work or school accounts) share the IMAP server
        # and the login, not the submission server nor the limits
        Provider(
            "outlook",
            {
                "url-smtp": "smtp://smtp-mail.outlook.com:587",
                "url-imap": "imaps://outlook.office365.com:993",
                "auth": "oauth2",
            },
            {"emails-per-day": 300, "recipients-per-email": 100},
            "OAuth2 (XOAUTH2): Microsoft turned basic authentication off",
        ),
        Provider(
            "exchange-online",
            {
                "url-smtp": "smtp://smtp.office365.com:587",
                "url-imap": "imaps://outlook.office365.com:993",
                "auth": "oauth2",
            },
            {"emails-per-minute": 30, "emails-per-day": 10000, "recipients-per-email": 500},
            "OAuth2 (XOAUTH2): Microsoft turned basic authentication off",
        ),
        Provider(
            "fastmail",
            {
                "url-smtp": "smtps://smtp.fastmail.com:465",
                "url-imap": "imaps://imap.fastmail.com:993",
            },
            {},
            "an app password",
        ),
        Provider(
            "icloud",
            {"url-smtp": "smtp://smtp.mail.me.com:587", "url-imap": "imaps://imap.mail.me.com:993"},
            {"emails-per-day": 1000, "recipients-per-email": 500},
            "an app-specific password",
        ),
        Provider(
            "yahoo",
            {
                "url-smtp": "smtps://smtp.mail.yahoo.com:465",
                "url-imap": "imaps://imap.mail.yahoo.com:993",
            },
            {},
            "an app password, or OAuth2 (auth: oauth2)",
        ),
        Provider("generic"),
    )
}


def with_profile(email: Mapping[str, Any], provider: Provider) -> dict[str, Any]:
    """The ``email:`` mapping with ``provider``'s defaults under what it says itself
    (``user:`` and ``limits:`` merged key by key: a key given wins), and ``on-receive:
    delete`` as the provider deletes (Gmail: ``move:\\Trash``, a role its server names)."""
    out = dict(email)
    if provider.delete is not None and email.get("on-receive") == "delete":
        out["on-receive"] = provider.delete
    for key, defaults in (("user", provider.user), ("limits", provider.limits)):
        given = email.get(key)
        if defaults and (given is None or isinstance(given, Mapping)):
            out[key] = {**defaults, **(given or {})}
    return out


def filled_in(email: Mapping[str, Any], provider: Provider) -> list[tuple[str, Any]]:
    """What ``provider`` sets in the ``email:`` mapping ``email`` (as the file gives it,
    before :func:`with_profile`): each key the file leaves out, as ``(key, value)`` with
    its full name (``user.url-smtp``, ``limits.emails-per-day``, ``on-receive``)."""
    out: list[tuple[str, Any]] = []
    for key, defaults in (("user", provider.user), ("limits", provider.limits)):
        given = email.get(key)
        if given is not None and not isinstance(given, Mapping):
            continue  # (a value of another kind: the configuration's own error)
        out += [(f"{key}.{name}", value) for name, value in defaults.items()
                if name not in (given or {})]  # fmt: skip
    if provider.delete is not None and email.get("on-receive") == "delete":
        out.append(("on-receive", provider.delete))
    return out
