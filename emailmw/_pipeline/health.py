"""The report's verdict on the traffic (``emailmw analyze``, the first screen): loss,
latency, unanswered calls and clock skew against thresholds the user can set. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["HealthThresholds", "health_verdict"]


@dataclass(frozen=True)
class HealthThresholds:
    """What the report's verdict calls unhealthy (``emailmw analyze --max-loss ...``):
    a share of the messages lost (percent), a topic's p99 latency, unanswered calls, and a
    publisher's clock ahead of the server's (latencies below zero, in ms)."""

    loss_percent: float = 0.1
    p99_ms: float = 1000.0
    unanswered: int = 0
    skew_ms: float = 100.0


def health_verdict(
    overview: Any, summary: dict[str, Any], limits: HealthThresholds
) -> tuple[str, list[str]]:
    """The traffic's health in one word (``healthy``, ``degraded``: over a threshold,
    ``unhealthy``: messages lost or calls unanswered beyond theirs) and why, a sentence a
    finding. Pure."""
    findings: list[tuple[str, str]] = []
    sent = sum(h["sent"] for h in overview.publisher_health)
    lost = summary.get("lost", 0)
    if sent and 100 * lost / sent > limits.loss_percent:
        share = f"{100 * lost / sent:.2f} %, over {limits.loss_percent:g} %"
        findings.append(("unhealthy", f"{lost:,} of {sent:,} messages lost ({share})"))
    slow = [s for s in overview.topic_stats
            if s["latency_p99_ms"] is not None and s["latency_p99_ms"] > limits.p99_ms]  # fmt: skip
    if slow:
        worst = max(slow, key=lambda s: s["latency_p99_ms"])
        name, p99 = str(worst["topic"]).encode("unicode_escape").decode(), worst["latency_p99_ms"]
        findings.append(("degraded", f"{len(slow)} topic(s) with a p99 latency over "
                         f"{limits.p99_ms:g} ms (worst {name}: {p99:,.0f} ms)"))  # fmt: skip
    unanswered = summary.get("calls", 0) - summary.get("answered", 0)
    if unanswered > limits.unanswered:
        findings.append(("unhealthy", f"{unanswered:,} service call(s) unanswered"))
    lows = [s for s in overview.topic_stats
            if s["latency_p50_ms"] is not None and s["latency_p50_ms"] < 0]  # fmt: skip
    if lows:  # (said whatever the threshold: a latency below zero is never true)
        worst = min(lows, key=lambda s: s["latency_p50_ms"])
        name = str(worst["topic"]).encode("unicode_escape").decode()
        skew = f"{name}'s median latency is {worst['latency_p50_ms']:,.1f} ms"
        over = -worst["latency_p50_ms"] > limits.skew_ms
        findings.append(("degraded" if over else "note",
                         f"a publisher's clock is ahead of the server's ({skew}"
                         f"{f', {len(lows)} topics below zero' if len(lows) > 1 else ''}): "
                         "latencies are off by as much"))  # fmt: skip
    if not any(k != "note" for k, _ in findings):
        return "healthy", [
            "no loss, latency, unanswered call or clock skew over its threshold",
            *(text for _, text in findings),
        ]
    level = "unhealthy" if any(k == "unhealthy" for k, _ in findings) else "degraded"
    return level, [text for _, text in findings]
