"""Delivery modes under the transport contract (``docs/delivery-modes.md``): the group
protocol's pure part and store contract (``model``, what this package exports), one
member's receiver over a store (``receiver``), and the stores: IMAP (``imap``) and in
process (``memory``). The package imports only ``model``, so that the transport contract
can name the store contract."""

from .model import (
    MODES,
    GroupSettings,
    GroupStore,
    Head,
    Holding,
    Lease,
    Liveness,
    MemberRecord,
    Plan,
    check_group,
    plan,
)

__all__ = [
    "MODES",
    "GroupSettings",
    "GroupStore",
    "Head",
    "Holding",
    "Lease",
    "Liveness",
    "MemberRecord",
    "Plan",
    "check_group",
    "plan",
]
