"""Wait sets and guard conditions."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from emailmw import (
    ClosedError,
    Context,
    GuardCondition,
    GuardConditionAlreadyInUseError,
    Publisher,
    ServiceClient,
    ServiceServer,
    Subscription,
    WaitSet,
)


def test_wait_reports_what_is_ready(ctx: Context) -> None:
    sub = Subscription("t", context=ctx)
    quiet = Subscription("quiet", context=ctx)
    server = ServiceServer("s", context=ctx)
    client = ServiceClient("s", context=ctx)
    gc = GuardCondition()
    ws = WaitSet([sub, quiet], [client], [server], [gc])
    Publisher("t", context=ctx).publish("x")
    result = ws.wait(5)
    assert result.subscriptions == (sub,)
    assert result.servers == result.clients == result.guard_conditions == ()
    assert sub.get_message() == "x"

    seq = client.send_request("q")
    result = ws.wait(5)
    assert result.servers == (server,)
    assert quiet not in result
    request = server.get_request()
    assert request is not None
    server.send_response(request.id, "a")
    assert ws.wait(5).clients == (client,)
    assert client.get_response(seq) == "a"
    gc.trigger()
    assert ws.wait(5).guard_conditions == (gc,)
    assert ws.wait(0).timed_out


def test_timeout_zero_polls_and_positive_timeout_bounds_the_wait(ctx: Context) -> None:
    ws = WaitSet([Subscription("t", context=ctx)])
    assert ws.wait(0).timed_out
    start = time.monotonic()
    assert ws.wait(0.2).timed_out
    assert time.monotonic() - start >= 0.2


def test_negative_timeout_blocks_until_a_trigger_from_another_thread() -> None:
    gc = GuardCondition()
    ws = WaitSet(guard_conditions=[gc])
    threading.Timer(0.1, gc.trigger).start()
    result = ws.wait(-1)
    assert result.guard_conditions == (gc,)
    # the trigger was consumed by the wait that reported it
    assert ws.wait(0).timed_out
    assert not gc.triggered


def test_several_triggers_before_a_wait_count_once() -> None:
    gc = GuardCondition()
    ws = WaitSet(guard_conditions=[gc])
    gc.trigger()
    gc.trigger()
    assert gc in ws.wait(0)
    assert ws.wait(0).timed_out


def test_guard_condition_is_in_one_wait_set_at_a_time() -> None:
    gc = GuardCondition()
    first = WaitSet(guard_conditions=[gc])
    with pytest.raises(GuardConditionAlreadyInUseError):
        WaitSet(guard_conditions=[gc])
    first.add_guard_condition(gc)  # adding again to the same set is fine
    first.clear()
    second = WaitSet(guard_conditions=[gc])
    second.close()
    WaitSet(guard_conditions=[gc])


def test_empty_wait_set_is_a_sleep() -> None:
    ws = WaitSet()
    start = time.monotonic()
    assert ws.wait(0.2).timed_out
    assert time.monotonic() - start >= 0.2
    with pytest.raises(ValueError, match="never return"):
        ws.wait(-1)


def test_wait_set_is_reusable_and_clearable(ctx: Context) -> None:
    sub = Subscription("t", context=ctx)
    pub = Publisher("t", context=ctx)
    ws = WaitSet([sub])
    for i in range(3):
        pub.publish(str(i))
        assert sub in ws.wait(5)
        assert sub.get_message() == str(i)
    ws.clear()
    assert ws.subscriptions == ()
    pub.publish("x")
    assert ws.wait(0.05).timed_out


def test_closed_entity_or_wait_set_raises(ctx: Context) -> None:
    sub = Subscription("t", context=ctx)
    ws = WaitSet([sub])
    sub.close()
    with pytest.raises(ClosedError):
        ws.wait(0)
    ws.close()
    with pytest.raises(ClosedError):
        ws.wait(0)


def test_blocked_wait_uses_under_one_percent_of_a_core() -> None:
    """Event-driven waiting: a process blocked for 2 s in wait() burns (almost) no CPU.

    Measured in a fresh process so no other test's threads are counted.
    """
    script = textwrap.dedent(
        """
        import time, emailmw
        with emailmw.Context({"intraprocess": True}) as ctx:
            sub = emailmw.Subscription("t", context=ctx)
            server = emailmw.ServiceServer("s", context=ctx)
            gc = emailmw.GuardCondition()
            ws = emailmw.WaitSet([sub], servers=[server], guard_conditions=[gc])
            cpu0, wall0 = time.process_time(), time.monotonic()
            assert ws.wait(2.0).timed_out
            cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        print(cpu / wall)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert float(out.stdout) < 0.01, out.stdout
