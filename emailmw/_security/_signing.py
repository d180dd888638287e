"""Signing and verifying emails: pure functions over :class:`~emailmw.Email`.

The signature is one header, ``Emailmw-Signature: v=1; i=IDENTITY; h=EXTRA; s=BASE64``: an
Ed25519 signature (RFC 8032) by IDENTITY over the canonical form of the email, which is the
email as emailmw *parses* it, not its bytes. So it survives what mail servers do to bytes
(re-folded headers, added ``Received:`` lines, a body re-encoded from 8bit to
quoted-printable or base64, CRLF/LF changes) and breaks on any change to what the email
means. ``docs/security.md`` gives the measurements behind this choice (against DKIM).

Canonical form (version 1), bytes::

    "emailmw-signature/1" NUL IDENTITY
    then for each signed name, in order: NUL name NUL value
    then NUL NUL, the body's UTF-8 length as 8 bytes big-endian, the body's UTF-8 bytes

The signed names are :data:`ALWAYS_SIGNED` (signed whether present or not, so that adding
one breaks the signature) and then the ``h=`` names (the application's own headers, lower
case, ``:``-separated). Values are the decoded header values (RFC 2047 words decoded,
unfolded, stripped); From and Reply-To are signed as their bare addresses (``a@b``), To and
Cc are not signed (servers may rewrite them; they do not change what an email means). No
name or value can hold a NUL (the wire format refuses it), so the form is unambiguous.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .._core.errors import InvalidHeaderError
from .._core.types import Email
from ._keystore import NAME_RE, Identity, PublicIdentity

__all__ = [
    "ALWAYS_SIGNED",
    "CUSTODY_HEADER",
    "ENCRYPTION_HEADER",
    "Hop",
    "ORIGIN_HEADER",
    "RECIPIENTS_HEADER",
    "VIA_HEADER",
    "Origin",
    "SIGNATURE_HEADER",
    "TRANSIT_HEADERS",
    "Signature",
    "SignatureCheck",
    "canonical",
    "check_signature",
    "read_custody",
    "read_origin",
    "read_signature",
    "recipient_tag",
    "recipients_header",
    "sign",
    "sign_custody",
    "sign_origin",
    "signed_for",
    "trusted_key",
    "verify",
    "verify_custody",
    "verify_origin",
]

SIGNATURE_HEADER: Final = "Emailmw-Signature"
ENCRYPTION_HEADER: Final = "Emailmw-Encryption"
#: the originator's signature over what no relay may change (routed mail)
ORIGIN_HEADER: Final = "Emailmw-Origin"
#: who a signed email is for (tags of its To, Cc and Bcc addresses)
RECIPIENTS_HEADER: Final = "Emailmw-Recipients"
#: the identities of the relays a routed message passed, in order
VIA_HEADER: Final = "Route-Via"
#: each hop's signed word on whom it sent a routed message to, the originator's first
CUSTODY_HEADER: Final = "Route-Custody"
_SIGNATURE_LOWER: Final = SIGNATURE_HEADER.lower()
ALWAYS_SIGNED: Final = (
    "subject",
    "from",
    "reply-to",
    "message-id",
    "in-reply-to",
    "references",
    "date",
    "source-timestamp",
    "publisher-gid",
    "publisher-sequence-number",
    "client-gid",
    "request-sequence-number",
    "message-type",
    "emailmw-encryption",
)
_ALWAYS: Final = frozenset(ALWAYS_SIGNED)
#: what servers add or rewrite on the way; never signed as an application header
TRANSIT_HEADERS: Final = frozenset(
    {"received", "return-path", "delivered-to", "x-original-to", "to", "cc", "bcc", "sender",
     "emailmw-resent", _SIGNATURE_LOWER}
)  # fmt: skip
_MAGIC: Final = b"emailmw-signature/1"


def _bare(addresses: tuple[str, ...]) -> str:
    return ",".join(parseaddr(a)[1] or a for a in addresses)


def _value(email: Email, name: str) -> str:
    if name == "subject":
        return email.subject
    if name == "from":
        return _bare((email.from_,)) if email.from_ else ""
    if name == "reply-to":
        return _bare(email.reply_to)
    if name == "message-id":
        return email.message_id or ""
    if name == "in-reply-to":
        return email.in_reply_to or ""
    if name == "references":
        return " ".join(email.references)
    return email.headers.get(name, "")


def _form(email: Email, head: list[bytes], names: tuple[str, ...]) -> bytes:
    """``head``, then NUL name NUL value for each of ``names``, then NUL NUL, the body's
    length (8 bytes big-endian) and the body: the canonical forms' common layout."""
    parts = list(head)
    for name in names:
        parts.append(name.encode())
        parts.append(_value(email, name).encode("utf-8", "surrogateescape"))
    body = email.body.encode("utf-8", "surrogateescape")
    return b"\0".join(parts) + b"\0\0" + len(body).to_bytes(8, "big") + body


def canonical(email: Email, identity: str, extra: tuple[str, ...]) -> bytes:
    """The bytes signed for ``email`` by ``identity`` with application headers ``extra``."""
    return _form(email, [_MAGIC, identity.encode()], (*ALWAYS_SIGNED, *extra))


def _tags(value: str, header: str) -> dict[str, str] | str:
    """A signature header's ``k=v; ...`` tags (its version checked to be 1), or why it is
    malformed."""
    tags: dict[str, str] = {}
    for part in value.split(";"):
        key, eq, val = part.strip().partition("=")
        if not eq or key in tags:
            return f"malformed {header} header"
        tags[key] = val.strip()
    if tags.get("v") != "1":
        return f"{header} version {tags.get('v')!r} is not 1"
    return tags


def _ed25519(tags: dict[str, str], header: str) -> bytes | str:
    """The Ed25519 signature in a header's ``s=`` tag, or why it is not one."""
    try:
        raw = base64.b64decode(tags.get("s", ""), validate=True)
    except (binascii.Error, ValueError):
        return f"{header} signature is not base64"
    if len(raw) != 64:
        return f"{header} signature is not an Ed25519 signature"
    return raw


def _extra_names(email: Email) -> tuple[str, ...]:
    return tuple(
        sorted(
            lower
            for name in email.headers
            if (lower := name.lower()) not in _ALWAYS and lower not in TRANSIT_HEADERS
        )
    )


def sign(email: Email, identity: Identity) -> Email:
    """``email`` with its ``Emailmw-Signature`` header (replacing one it had). The email
    must be complete (From, Message-ID and Date set: what a sender fills in)."""
    headers = [(k, v) for k, v in email.headers.items() if k.lower() != _SIGNATURE_LOWER]
    unsigned = email.replace(headers=headers)
    extra = _extra_names(unsigned)
    signature = identity.signing_key.sign(canonical(unsigned, identity.name, extra))
    value = (
        f"v=1; i={identity.name}; h={':'.join(extra)}; "
        f"s={base64.b64encode(signature).decode('ascii')}"
    )
    return unsigned.replace(headers=[*headers, (SIGNATURE_HEADER, value)])


@dataclass(frozen=True, slots=True)
class Signature:
    """A parsed ``Emailmw-Signature`` header."""

    identity: str
    extra: tuple[str, ...]
    signature: bytes


def read_signature(email: Email) -> Signature | str | None:
    """The email's signature; None when it has none; a reason (str) when it is malformed."""
    value = email.headers.get(SIGNATURE_HEADER)
    if value is None:
        return None
    tags = _tags(value, SIGNATURE_HEADER)
    if isinstance(tags, str):
        return tags
    identity = tags.get("i", "")
    if not NAME_RE.fullmatch(identity):
        return f"{SIGNATURE_HEADER} names no valid identity"
    extra = tuple(n for n in tags.get("h", "").split(":") if n)
    if any(n in _ALWAYS or n in TRANSIT_HEADERS or n != n.lower() for n in extra):
        return f"{SIGNATURE_HEADER} lists a header it may not (h=)"
    raw = _ed25519(tags, SIGNATURE_HEADER)
    return raw if isinstance(raw, str) else Signature(identity, extra, raw)


def verify(email: Email, signature: Signature, key: Ed25519PublicKey) -> bool:
    """True when ``signature`` (read from ``email``) is valid under ``key``."""
    try:
        key.verify(signature.signature, canonical(email, signature.identity, signature.extra))
    except InvalidSignature:
        return False
    return True


def trusted_key(
    trusted: Mapping[str, PublicIdentity], identity: str, at_ns: int
) -> PublicIdentity | str:
    """The trusted key of ``identity`` valid at ``at_ns`` (ns since the epoch), or why
    there is none: unknown, or expired then."""
    public = trusted.get(identity)
    if public is None:
        return f"identity {identity!r} is not trusted"
    if public.expired(at_ns / 1e9):
        return f"the key of {identity!r} expired at {public.expiry_text()}"
    return public


@dataclass(frozen=True, slots=True)
class SignatureCheck:
    """What checking an email's signature found: ``status`` ``unsigned``, ``invalid``,
    ``untrusted`` or ``verified``, the ``reason`` (empty when verified), and the
    ``signature`` when it verified."""

    status: str
    reason: str
    signature: Signature | None = None


def check_signature(
    email: Email, trusted: Mapping[str, PublicIdentity], at_ns: int
) -> SignatureCheck:
    """Check ``email``'s signature against the ``trusted`` keys, valid at ``at_ns``: the one
    signature check of emailmw, on the receive path (``Security``) and in the pipeline's
    landing. Pure."""
    signature = read_signature(email)
    if signature is None:
        return SignatureCheck("unsigned", "no signature")
    if isinstance(signature, str):
        return SignatureCheck("invalid", signature)
    public = trusted_key(trusted, signature.identity, at_ns)
    if isinstance(public, str):
        return SignatureCheck("untrusted", public)
    if not verify(email, signature, public.verify_key):
        return SignatureCheck("invalid", f"signature of {signature.identity!r} does not verify")
    return SignatureCheck("verified", "", signature)


# ------------------------------------------------------------------ chain of custody

#: what an originator signs of a routed message: what a relay carries over unchanged
ORIGIN_SIGNED: Final = (
    "subject",
    "source-timestamp",
    "route-to",
    "route-from",
    "route-reply",
    "route-orig",
    "route-face",
    "emailmw-encryption",
)
_ORIGIN_MAGIC: Final = b"emailmw-origin/1"


@dataclass(frozen=True, slots=True)
class Origin:
    """A parsed ``Emailmw-Origin`` header: who first sent a routed message, and the
    Message-ID it sent it with."""

    identity: str
    message_id: str
    signature: bytes


def _origin_canonical(email: Email, identity: str, message_id: str) -> bytes:
    return _form(email, [_ORIGIN_MAGIC, identity.encode(), message_id.encode()], ORIGIN_SIGNED)


def sign_origin(email: Email, identity: Identity) -> Email:
    """``email`` (a routed message leaving its originator, Message-ID set) with its
    ``Emailmw-Origin`` header: a signature over :data:`ORIGIN_SIGNED` and the body, which
    every relay carries over, so the destination verifies the originator."""
    message_id = email.message_id or ""
    raw = identity.signing_key.sign(_origin_canonical(email, identity.name, message_id))
    value = f"v=1; i={identity.name}; m={message_id}; s={base64.b64encode(raw).decode('ascii')}"
    headers = [(k, v) for k, v in email.headers.items() if k.lower() != ORIGIN_HEADER.lower()]
    return email.replace(headers=[*headers, (ORIGIN_HEADER, value)])


def read_origin(email: Email) -> Origin | str | None:
    """The email's origin signature; None without one; a reason when it is malformed."""
    value = email.headers.get(ORIGIN_HEADER)
    if value is None:
        return None
    tags = _tags(value, ORIGIN_HEADER)
    if isinstance(tags, str):
        return tags
    identity, message_id = tags.get("i", ""), tags.get("m", "")
    if not NAME_RE.fullmatch(identity) or not message_id:
        return f"{ORIGIN_HEADER} names no valid identity or Message-ID"
    raw = _ed25519(tags, ORIGIN_HEADER)
    return raw if isinstance(raw, str) else Origin(identity, message_id, raw)


def verify_origin(email: Email, origin: Origin, key: Ed25519PublicKey) -> bool:
    """True when ``origin`` (read from ``email``) is valid under ``key``."""
    try:
        key.verify(origin.signature, _origin_canonical(email, origin.identity, origin.message_id))
    except InvalidSignature:
        return False
    return True


# ------------------------------------------------------------------ recipients


def recipient_tag(message_id: str, address: str) -> str:
    """The tag of one recipient ``address`` of email ``message_id``: a salted hash, so the
    signed list says who an email is for without showing its Bcc addresses in clear."""
    bare = (parseaddr(address)[1] or address).strip().lower()
    digest = hashlib.sha256(f"{message_id}\0{bare}".encode()).digest()[:12]
    return base64.urlsafe_b64encode(digest).decode("ascii")


def recipients_header(email: Email) -> str:
    """The ``Emailmw-Recipients`` value of ``email``: a tag for each To, Cc and Bcc
    address (mail servers drop Bcc, so the header is what covers them)."""
    message_id = email.message_id or ""
    tags = sorted({recipient_tag(message_id, a) for a in (*email.to, *email.cc, *email.bcc)})
    return "v=1; t=" + " ".join(tags)


def signed_for(email: Email, accounts: tuple[str, ...]) -> bool | None:
    """True when ``email``'s ``Emailmw-Recipients`` lists one of ``accounts``; False when
    it lists none of them; None when it has no such header."""
    value = email.headers.get(RECIPIENTS_HEADER)
    if value is None:
        return None
    listed = set(value.partition("t=")[2].split())
    message_id = email.message_id or ""
    return any(recipient_tag(message_id, a) in listed for a in accounts)


# ------------------------------------------------------------------ hop by hop


_CUSTODY_MAGIC: Final = b"emailmw-custody/1"


@dataclass(frozen=True, slots=True)
class Hop:
    """One entry of a routed message's ``Route-Custody``: hop ``identity`` sent the copy
    with Message-ID ``message_id`` to the accounts whose recipient tags are ``tags``, and
    signed that (with the entry before it: the chain)."""

    identity: str
    message_id: str
    tags: frozenset[str]
    signature: bytes

    def sent_to(self, address: str) -> bool:
        """True when this hop sent its copy to ``address``."""
        return recipient_tag(self.message_id, address) in self.tags


def _hop_canonical(
    origin_id: str, index: int, identity: str, message_id: str, tags: frozenset[str],
    previous: bytes,
) -> bytes:  # fmt: skip
    """The bytes hop ``index`` signs: the message (its originator's Message-ID), its place
    in the chain, who sent which copy to whom, and the signature of the hop before it (last:
    it is the only field that may hold any byte)."""
    fields = (_CUSTODY_MAGIC, origin_id.encode(), str(index).encode(), identity.encode(),
              message_id.encode(), " ".join(sorted(tags)).encode())  # fmt: skip
    return b"\0".join((*fields, previous))


def _entry(hop: Hop) -> str:
    tags = ".".join(sorted(hop.tags))
    signature = base64.b64encode(hop.signature).decode("ascii")
    return f"i={hop.identity} m={hop.message_id} t={tags} s={signature}"


def read_custody(email: Email) -> tuple[Hop, ...] | str | None:
    """The email's chain of custody, hop 0 (the originator) first; None without one; a
    reason when it is malformed."""
    value = email.headers.get(CUSTODY_HEADER)
    if value is None:
        return None
    hops: list[Hop] = []
    for text in value.split(","):
        tags: dict[str, str] = {}
        for part in text.split():
            key, eq, val = part.partition("=")
            if not eq or key in tags or key not in ("i", "m", "t", "s"):
                return f"malformed {CUSTODY_HEADER} header"
            tags[key] = val
        identity, message_id = tags.get("i", ""), tags.get("m", "")
        if not NAME_RE.fullmatch(identity) or not message_id or len(tags) != 4:
            return f"malformed {CUSTODY_HEADER} header"
        raw = _ed25519(tags, CUSTODY_HEADER)
        if isinstance(raw, str):
            return raw
        listed = frozenset(t for t in tags["t"].split(".") if t)
        hops.append(Hop(identity, message_id, listed, raw))
    return tuple(hops)


def sign_custody(email: Email, identity: Identity, origin_id: str) -> Email:
    """``email`` (a routed copy leaving a hop: Message-ID and recipients set) with one more
    ``Route-Custody`` entry: ``identity`` sent this copy to its To, Cc and Bcc accounts,
    signed together with the entry before it. ``origin_id``: the originator's Message-ID
    (the email's own when it is the originator's)."""
    chain = read_custody(email)
    hops = chain if isinstance(chain, tuple) else ()
    message_id = email.message_id or ""
    if any(c in message_id for c in ", \t"):
        raise InvalidHeaderError(
            f"a routed message's Message-ID cannot hold , or a space: {message_id!r}"
        )
    tags = frozenset(recipient_tag(message_id, a) for a in (*email.to, *email.cc, *email.bcc))
    previous = hops[-1].signature if hops else b""
    raw = identity.signing_key.sign(
        _hop_canonical(origin_id, len(hops), identity.name, message_id, tags, previous)
    )
    entries = [*hops, Hop(identity.name, message_id, tags, raw)]
    headers = [(k, v) for k, v in email.headers.items() if k.lower() != CUSTODY_HEADER.lower()]
    value = ", ".join(_entry(hop) for hop in entries)
    return email.replace(headers=[*headers, (CUSTODY_HEADER, value)])


def verify_custody(
    hops: tuple[Hop, ...], origin_id: str, trusted: Mapping[str, PublicIdentity], at_ns: int
) -> tuple[str, str] | None:
    """None when every hop's signature of ``hops`` verifies (each with the one before it);
    else (status, reason): ``untrusted`` or ``invalid``. Pure."""
    previous = b""
    for index, hop in enumerate(hops):
        public = trusted_key(trusted, hop.identity, at_ns)
        if isinstance(public, str):
            return "untrusted", f"hop {index} of {CUSTODY_HEADER}: {public}"
        form = _hop_canonical(origin_id, index, hop.identity, hop.message_id, hop.tags, previous)
        try:
            public.verify_key.verify(hop.signature, form)
        except InvalidSignature:
            return "invalid", f"hop {index} of {CUSTODY_HEADER} ({hop.identity!r}) does not verify"
        previous = hop.signature
    return None
