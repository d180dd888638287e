"""The transport registry, and the one place a transport is built from it
(``intraprocess``, ``native``, ``curl``).

A transport declares itself once (:class:`TransportKind`): how it builds its sender, its
receiver (alone too: a process that only reads), the group stores of its delivery groups,
and the probes ``emailmw doctor`` runs against its servers. :func:`make_transport` and
:func:`make_receiver` look it up by the configuration's ``transport``; the conformance
suites run over every registered one (``tests/email/test_conformance.py``). A new
transport (JMAP, or IMAP with another way to log in) is one :func:`register_transport`
call. Builders import their backends when called (pycurl, aiosmtplib: only when used).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._core.config import (
    INTRAPROCESS_ACCOUNT,
    MAIL_ACCOUNT,
    AccountFormat,
    Options,
    register_transport_name,
)
from .._core.errors import ConfigError, InvalidArgumentError
from .base import EmailReceiver, EmailSender
from .budget import ReceiveBudget
from .group.model import GroupStore
from .transport import Transport

if TYPE_CHECKING:
    from .probe import ServerProbe

__all__ = [
    "TransportKind",
    "make_receiver",
    "make_transport",
    "register_transport",
    "transport_kind",
    "transport_names",
]

#: a check of one of a transport's servers, for ``emailmw doctor`` (a ``probe.ServerProbe``)
Probe = Callable[[Options], "ServerProbe"]


@dataclass(frozen=True, slots=True)
class TransportKind:
    """One transport. ``sender``/``receiver``: built from the options (the receiver with
    the context's receive budget); ``group_stores``: the options -> a factory of the store
    of each delivery group (by name), None when its groups cannot span processes;
    ``build``: the whole transport at once instead (an in-process pair); ``probes``: the
    doctor's checks of its servers, by protocol; ``account``: how its account (the
    configuration's ``user:``) is read, including how it logs in."""

    name: str
    receiver: Callable[[Options, ReceiveBudget | None], EmailReceiver] | None = None
    sender: Callable[[Options], EmailSender] | None = None
    group_stores: Callable[[Options], Callable[[str], GroupStore]] | None = None
    build: Callable[[Options, ReceiveBudget | None], Transport] | None = None
    probes: tuple[tuple[str, Probe], ...] = ()
    account: AccountFormat = MAIL_ACCOUNT


_KINDS: dict[str, TransportKind] = {}


def register_transport(kind: TransportKind) -> TransportKind:
    """Add ``kind`` to the registry (once per name)."""
    if kind.name in _KINDS:
        raise InvalidArgumentError(f"transport {kind.name!r} is registered already")
    if kind.build is None and (kind.sender is None or kind.receiver is None):
        raise InvalidArgumentError(f"transport {kind.name!r} needs a sender and a receiver")
    _KINDS[kind.name] = kind
    register_transport_name(kind.name, kind.account)
    return kind


def transport_names() -> tuple[str, ...]:
    """The registered transports' names, in the order they were registered."""
    return tuple(_KINDS)


def transport_kind(name: str) -> TransportKind:
    """The transport ``name``; :class:`~emailmw.ConfigError` naming the others when there
    is none."""
    found = _KINDS.get(name)
    if found is None:
        raise ConfigError(f"no such transport: {name!r} (one of {', '.join(_KINDS)})")
    return found


def make_transport(options: Options, budget: ReceiveBudget | None = None) -> Transport:
    """Connect a sender and a receiver; raises a :class:`~emailmw.TransportError` when the
    server cannot be reached, refuses the login or presents an untrusted certificate.
    ``intraprocess``: a connected in-process pair, of this context alone. ``budget``: the
    receive budget the receiver reserves from (none: unbounded)."""
    kind = transport_kind(options.transport)
    if kind.build is not None:
        return kind.build(options, budget)
    assert kind.sender is not None
    assert kind.receiver is not None
    sender = kind.sender(options)
    try:
        stores = kind.group_stores(options) if kind.group_stores is not None else None
        return Transport(sender, kind.receiver(options, budget), stores)
    except BaseException:
        sender.close()
        raise


def make_receiver(options: Options, budget: ReceiveBudget | None = None) -> EmailReceiver:
    """The receiver of a mail transport alone (no sender: nothing is sent, no spool is
    taken), for a process that only reads the mailbox."""
    kind = transport_kind(options.transport)
    if kind.receiver is None:
        raise InvalidArgumentError(f"no receiver alone for transport {options.transport!r}")
    return kind.receiver(options, budget)


# ----------------------------------------------------------------------------- the three


def _intraprocess(options: Options, budget: ReceiveBudget | None) -> Transport:
    from .intraprocess import intraprocess_transport

    return intraprocess_transport(
        options.recipients.from_, max_message_size=options.max_message_size, budget=budget
    )


def _imap_stores(options: Options) -> Callable[[str], GroupStore]:
    from .group.imap import ImapGroupStore

    return functools.partial(ImapGroupStore, options)


def _native_sender(options: Options) -> EmailSender:
    from .native import NativeSender

    return NativeSender(options)


def _native_receiver(options: Options, budget: ReceiveBudget | None) -> EmailReceiver:
    from .native import NativeReceiver

    return NativeReceiver(options, budget)


def _curl_sender(options: Options) -> EmailSender:
    from .curl import CurlSender

    return CurlSender(options)


def _curl_receiver(options: Options, budget: ReceiveBudget | None) -> EmailReceiver:
    from .curl import CurlReceiver

    return CurlReceiver(options, budget)


def _probe_smtp(options: Options) -> ServerProbe:
    from .probe import probe_smtp

    return probe_smtp(options)


def _probe_imap(options: Options) -> ServerProbe:
    from .probe import probe_imap

    return probe_imap(options)


_MAIL_PROBES: tuple[tuple[str, Probe], ...] = (("smtp", _probe_smtp), ("imap", _probe_imap))
register_transport(TransportKind("native", _native_receiver, _native_sender, _imap_stores,
                                 probes=_MAIL_PROBES))  # fmt: skip
register_transport(TransportKind("curl", _curl_receiver, _curl_sender, _imap_stores,
                                 probes=_MAIL_PROBES))  # fmt: skip
# (an in-process pair needs no account: ``user:``, when given, names the sender's address)
register_transport(TransportKind("intraprocess", build=_intraprocess,
                                 account=INTRAPROCESS_ACCOUNT))  # fmt: skip
