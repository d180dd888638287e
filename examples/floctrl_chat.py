"""A floctrl chat across two orchestras (docs/addressing.md, "floctrl"): orchestra
``red`` (nodes ann, bob) and ``blue`` (node cy), each with its supernode; a message to
``/*/*`` reaches everyone once, the sender included (the seed: it filters its own copy).

Runs on the intraprocess network; with email configurations it runs over mail."""

from __future__ import annotations

import threading
import time

import emailmw
from emailmw import floctrl


def main() -> None:
    net = emailmw.IntraprocessNetwork()
    members = {"red": ["ann", "bob"], "blue": ["cy"]}
    hubs = [o for o in members] + [f"{o}_{n}" for o, names in members.items() for n in names]
    routes = {hub: f"{hub}@chat.test" for hub in hubs}
    contexts = {
        hub: net.context(f"{hub}@chat.test", {"routing": {"hub": hub, "routes": routes}})
        for hub in hubs
    }
    got: list[str] = []
    done = threading.Event()
    everyone = 5

    def show(who: str) -> floctrl.Subscriber:
        class Screen:
            def receive_message(self, msg: floctrl.Message) -> None:
                got.append(f"{who:10} got {msg.body!r} (address {msg.address})")
                if len(got) == everyone:
                    done.set()

        return Screen()

    participants: list[floctrl.Node | floctrl.Supernode] = []
    for orch, names in members.items():
        supernode = floctrl.Supernode(
            orch,
            nodes={n: f"{orch}_{n}" for n in names},
            orchestras={o: o for o in members},
            context=contexts[orch],
        )
        participants.append(supernode)
        for name in names:
            participants.append(
                floctrl.Node(orch, name, supernode_hub=orch, context=contexts[f"{orch}_{name}"])
            )
    for participant in participants:
        participant.subscribe_to("chat", show(participant.path))
    ann = next(p for p in participants if p.path == "/red/ann")
    ann.publish(floctrl.Message(int(time.time() * 1000), "/*/*", "chat", "hello, everyone"))
    done.wait(10)
    print("\n".join(sorted(got)))
    for context in contexts.values():
        context.shutdown()


if __name__ == "__main__":
    main()
