"""Testing support: the transport and delivery-mode conformance suites (need pytest).

``emailmw.testing.mailserver`` starts a real Postfix + Dovecot on loopback for tests.
"""

from ._conformance import (
    BODIES,
    MultiRecipientConformance,
    TransportConformance,
    TransportUnderTest,
    receive_matching,
)
from ._modes import DeliveryModeConformance, GroupWorld

__all__ = [
    "BODIES",
    "DeliveryModeConformance",
    "GroupWorld",
    "MultiRecipientConformance",
    "TransportConformance",
    "TransportUnderTest",
    "receive_matching",
]
