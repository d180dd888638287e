"""YMP's vocabulary over emailmw's routing core (``docs/addressing.md``, "YMP"): a host
per context, services and actions, the spec's strict JSON envelope, packets."""

from ._core.payloads import YmpAnswer, YmpRequest
from ._faces.ymp import Action, YmpHost

__all__ = ["Action", "YmpAnswer", "YmpHost", "YmpRequest"]
