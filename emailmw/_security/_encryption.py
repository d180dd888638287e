"""Encrypting bodies to recipients' public keys: pure functions.

The body is sealed with a fresh 256-bit key (ChaCha20-Poly1305, RFC 8439; associated
data: the signer's identity, the Message-ID and the Subject, so a body moved into another
email, or re-signed by someone else, does not open); that key is wrapped for each
recipient with X25519 (RFC 7748) between a fresh ephemeral key and the recipient's key,
HKDF-SHA256 (RFC 5869) and ChaCha20-Poly1305.
Every primitive is the ``cryptography`` package's. The email carries::

    Emailmw-Encryption: v=2; e=EPHEMERAL; n=NONCE; r=NAME1:WRAPPED1,NAME2:WRAPPED2

and the sealed body in base64. Headers needed for routing (Subject, the metadata) stay
clear; the ``Emailmw-Encryption`` header is covered by the signature. A recipient whose
name is not in ``r=`` gets :class:`~emailmw.UndecryptableError` saying so, never garbage.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .._core.errors import InvalidArgumentError, UndecryptableError
from .._core.types import Email
from ._keystore import NAME_RE, Identity, PublicIdentity, b64, raw_public
from ._signing import ENCRYPTION_HEADER

__all__ = ["decrypt", "encrypt", "is_encrypted"]

_INFO: Final = b"emailmw-encryption/1"
_AD: Final = b"emailmw-encryption/2"
_ZERO_NONCE: Final = bytes(12)


def _wrap_key(shared: bytes, ephemeral: bytes, recipient: bytes) -> bytes:
    return HKDF(hashes.SHA256(), 32, ephemeral + recipient, _INFO).derive(shared)


def _associated(email: Email, signer: str) -> bytes:
    """What the sealed body is bound to: its signer, its Message-ID, its Subject."""
    return b"\0".join(
        (_AD, signer.encode(), (email.message_id or "").encode(), email.subject.encode())
    )


def is_encrypted(email: Email) -> bool:
    return ENCRYPTION_HEADER in email.headers


def encrypt(email: Email, recipients: Iterable[PublicIdentity], signer: str = "") -> Email:
    """``email`` (its Message-ID set) with its body sealed for ``recipients`` (at least
    one), bound to ``signer`` (the identity that signs it; '' for none)."""
    recipients = list(recipients)
    if not recipients:
        raise InvalidArgumentError("encrypt needs at least one recipient")
    content_key = ChaCha20Poly1305.generate_key()
    nonce = os.urandom(12)
    sealed = ChaCha20Poly1305(content_key).encrypt(
        nonce, email.body.encode("utf-8"), _associated(email, signer)
    )
    ephemeral = X25519PrivateKey.generate()
    ephemeral_raw = raw_public(ephemeral.public_key())
    wrapped = []
    for recipient in recipients:
        recipient_raw = raw_public(recipient.encrypt_key)
        key = _wrap_key(ephemeral.exchange(recipient.encrypt_key), ephemeral_raw, recipient_raw)
        wrapped.append(
            f"{recipient.name}:{b64(ChaCha20Poly1305(key).encrypt(_ZERO_NONCE, content_key, b''))}"
        )
    header = f"v=2; e={b64(ephemeral_raw)}; n={b64(nonce)}; r={','.join(wrapped)}"
    headers = [*email.headers.items(), (ENCRYPTION_HEADER, header)]
    body = base64.encodebytes(sealed).decode("ascii").rstrip("\n")  # 76-column lines
    return email.replace(body=body, headers=headers)


def decrypt(email: Email, identity: Identity | None, signer: str = "") -> Email:
    """``email`` with its body opened by ``identity``, as signed by ``signer`` ('' for
    none); :class:`UndecryptableError` when it is not for it or does not open (changed,
    moved to another email or re-signed by another identity)."""
    value = email.headers.get(ENCRYPTION_HEADER, "")
    tags = dict(part.strip().partition("=")[::2] for part in value.split(";"))
    try:
        if tags.get("v") != "2":
            raise InvalidArgumentError(f"version {tags.get('v')!r} is not 2")
        ephemeral_raw = base64.b64decode(tags["e"], validate=True)
        nonce = base64.b64decode(tags["n"], validate=True)
        wrapped = {}
        for item in tags["r"].split(","):
            name, _, blob = item.partition(":")
            if NAME_RE.fullmatch(name):
                wrapped[name] = base64.b64decode(blob, validate=True)
    except (KeyError, ValueError, binascii.Error) as exc:
        raise UndecryptableError(f"malformed {ENCRYPTION_HEADER} header ({exc})") from None
    if identity is None or identity.name not in wrapped:
        mine = "no identity" if identity is None else f"identity {identity.name!r}"
        raise UndecryptableError(
            f"the body is encrypted for {', '.join(sorted(wrapped)) or 'nobody'}, not for "
            f"this context's {mine}: add it to the sender's security.encrypt recipients"
        )
    try:
        ephemeral = X25519PublicKey.from_public_bytes(ephemeral_raw)
        wrap_key = _wrap_key(
            identity.decrypt_key.exchange(ephemeral), ephemeral_raw, identity.encrypt_public
        )
        content_key = ChaCha20Poly1305(wrap_key).decrypt(_ZERO_NONCE, wrapped[identity.name], b"")
        body = ChaCha20Poly1305(content_key).decrypt(
            nonce, base64.b64decode(email.body, validate=False), _associated(email, signer)
        )
        text = body.decode("utf-8")
    except (InvalidTag, ValueError, binascii.Error) as exc:
        raise UndecryptableError(
            f"the body encrypted for {identity.name!r} does not decrypt "
            f"({type(exc).__name__}): it was changed, moved from another email, re-signed "
            "by another identity, or made with another key"
        ) from None
    return email.replace(body=text)
