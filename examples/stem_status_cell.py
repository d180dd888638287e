"""A Stem cell answering ``status`` on hub ``lab``, asked from hub ``desk`` through a
gateway (docs/addressing.md, "Stem").

Runs on the intraprocess network; give each ``net.context(...)`` an email configuration
instead (``emailmw.Context("lab.yml")`` with ``routing:`` in it) and it runs over mail."""

from __future__ import annotations

import emailmw
from emailmw import stem


class StatusCell(stem.Cell):
    """Stem's classic: ``status_cmd`` returns the status text, which goes back as the
    ``response`` to the asker."""

    def status_cmd(self, msg: stem.StemMessage) -> str:
        return f"{self.address} is fine (asked by {msg.from_})"


def main() -> None:
    net = emailmw.IntraprocessNetwork()
    lab = net.context(
        "lab@lab.test", {"routing": {"hub": "lab", "routes": {"desk": "gw@lab.test"}}}
    )
    desk = net.context(
        "desk@desk.test", {"routing": {"hub": "desk", "routes": {"lab": "gw@desk.test"}}}
    )
    gateway = emailmw.Gateway(
        {"lab": net.context("gw@lab.test"), "desk": net.context("gw@desk.test")},
        {"lab": ("lab@lab.test", "lab"), "desk": ("desk@desk.test", "desk")},
    )
    with lab, desk, gateway:
        gateway.start()
        StatusCell("status", context=lab)
        asker = stem.Cell("asker", context=desk)
        print(asker.request("lab:status", "status").result(10))
        print(f"the gateway relayed {gateway.report()['relayed']} messages")


if __name__ == "__main__":
    main()
