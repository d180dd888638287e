"""Security: identities, signatures, permissions, replay protection, encryption.

``docs/security.md`` says what is protected and against whom. The decisions are pure
functions (:mod:`._signing`, :mod:`._permissions`, :mod:`._encryption`) and one state
machine (:class:`._policy.Security`), tested without a transport; the context applies them
on the way out (:class:`SecureSender`) and in (the polling thread).
"""

from ._encryption import decrypt, encrypt, is_encrypted
from ._grants import REPLY_TYPES, routed_grants, stem_send_name
from ._keystore import Identity, Keystore, PublicIdentity, check_identity_name
from ._permissions import Permissions, load_permissions, name_matches
from ._policy import Decision, ReplayGuard, Security, route_action, signer_key
from ._sender import SecureSender
from ._signing import (
    CUSTODY_HEADER,
    ENCRYPTION_HEADER,
    ORIGIN_HEADER,
    RECIPIENTS_HEADER,
    SIGNATURE_HEADER,
    VIA_HEADER,
    SignatureCheck,
    canonical,
    check_signature,
    read_signature,
    sign,
    verify,
)

__all__ = [
    "CUSTODY_HEADER",
    "ENCRYPTION_HEADER",
    "ORIGIN_HEADER",
    "RECIPIENTS_HEADER",
    "SIGNATURE_HEADER",
    "VIA_HEADER",
    "REPLY_TYPES",
    "Decision",
    "Identity",
    "Keystore",
    "Permissions",
    "PublicIdentity",
    "ReplayGuard",
    "SecureSender",
    "Security",
    "SignatureCheck",
    "canonical",
    "check_signature",
    "check_identity_name",
    "decrypt",
    "encrypt",
    "is_encrypted",
    "load_permissions",
    "name_matches",
    "read_signature",
    "route_action",
    "routed_grants",
    "sign",
    "signer_key",
    "stem_send_name",
    "verify",
]
