"""Testing support: the transport conformance suite (needs pytest).

``emailmw.testing.mailserver`` starts a real Postfix + Dovecot on loopback for tests.
"""

from ._conformance import (
    BODIES,
    MultiRecipientConformance,
    TransportConformance,
    TransportUnderTest,
    receive_matching,
)

__all__ = [
    "BODIES",
    "MultiRecipientConformance",
    "TransportConformance",
    "TransportUnderTest",
    "receive_matching",
]
