"""Wait on a subscription, a service server and a guard condition at once.

python examples/wait_set.py
"""

from __future__ import annotations

import threading

import emailmw


def main() -> None:
    with emailmw.Context({"intraprocess": True}) as ctx:
        sub = emailmw.Subscription("/chatter", context=ctx)
        server = emailmw.ServiceServer("/ping", context=ctx)
        stop = emailmw.GuardCondition()
        wait_set = emailmw.WaitSet([sub], servers=[server], guard_conditions=[stop])

        emailmw.Publisher("/chatter", context=ctx).publish("hello")
        emailmw.ServiceClient("/ping", context=ctx).send_request("ping")
        # another thread asks the loop to stop a moment later
        threading.Timer(0.2, stop.trigger).start()

        while True:
            ready = wait_set.wait(timeout=5.0)
            if ready.timed_out:
                raise SystemExit("nothing happened within 5 s")
            for s in ready.subscriptions:
                print("message:", s.get_message())
            for srv in ready.servers:
                request = srv.get_request()
                if request is not None:
                    print("request:", request.content)
                    srv.send_response(request.id, "pong")
            if stop in ready:
                print("guard condition triggered: stopping")
                break


if __name__ == "__main__":
    main()
