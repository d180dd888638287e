"""Layers 1-2: mail transports (senders, receivers, group stores, the probe). Private; the
contract is in ``base`` and ``docs/design.md``."""
