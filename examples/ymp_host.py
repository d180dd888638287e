"""A YMP host with one service and one action, called from another host
(docs/addressing.md, "YMP"): the spec's own example, request and answer.

Runs on the intraprocess network; with email configurations (``routing.hub`` set to the
host name) it runs over mail."""

from __future__ import annotations

from typing import Any

import emailmw
from emailmw import ymp


def post_example(request: ymp.YmpRequest) -> dict[str, Any]:
    """The action ``post example`` of service ``repository``: its answer's payload."""
    return {"status": "ok", "stored": request.payload.get("text", "")}


def main() -> None:
    net = emailmw.IntraprocessNetwork()
    one = net.context(
        "host1@example.test",
        {
            "routing": {
                "hub": "host1.example.com",
                "routes": {"host2.example.com": "host2@example.test"},
            }
        },
    )
    two = net.context(
        "host2@example.test",
        {
            "routing": {
                "hub": "host2.example.com",
                "routes": {"host1.example.com": "host1@example.test"},
            }
        },
    )
    with one, two:
        host2 = ymp.YmpHost("host2.example.com", context=two)
        host2.add_service("example", "repository", {"post example": post_example})
        host1 = ymp.YmpHost("host1.example.com", context=one)
        answer = host1.request(
            "host2.example.com", "example", "repository", "post example",
            {"text": "example text"}, sender=("example", "form"),
        ).result(10)  # fmt: skip
        print(f"answer from {answer.sender_host} to request {answer.reply_to}: {answer.payload}")


if __name__ == "__main__":
    main()
