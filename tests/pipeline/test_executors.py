"""Whether a Spark standalone master gave ``emailmw analyze`` an executor: decided from what
the master said (its grants, the executors' states), so a slow start on a busy machine is
waited for and only a master with no room is said within seconds. No JVM: the driver's
own lines, as Spark 4 logs them, fed to the watch."""

from __future__ import annotations

import pytest

from emailmw._pipeline.session import ExecutorWatch, executors_verdict

APP = "app-20261206231154-0000"
CONNECTED = f"[spark] INFO StandaloneSchedulerBackend: Connected to Spark cluster with app ID {APP}"
ADDED = (f"[spark] INFO StandaloneAppClient$ClientEndpoint: Executor added: {APP}/0 on "
         "worker-20261206231141-127.0.0.1-43665 (127.0.0.1:43665) with 1 core(s)")  # fmt: skip
GRANTED = (f"[spark] INFO StandaloneSchedulerBackend: Granted executor ID {APP}/0 on hostPort "
           "127.0.0.1:43665 with 1 core(s), 1024.0 MiB RAM")  # fmt: skip
RUNNING = (
    f"[spark] INFO StandaloneAppClient$ClientEndpoint: Executor updated: {APP}/0 is now RUNNING"
)
EXITED = (f"[spark] INFO StandaloneAppClient$ClientEndpoint: Executor updated: {APP}/0 is now "
          "EXITED (Command exited with code 1)")  # fmt: skip
WAITS = {"grant_wait": 7.0, "start_wait": 300.0}


def _watch(*lines: str) -> ExecutorWatch:
    watch = ExecutorWatch()
    for line in lines:
        watch.feed(line)
    return watch


def test_the_scheduler_s_lines_are_read_and_nothing_else_is() -> None:
    watch = ExecutorWatch()
    assert watch.feed(CONNECTED)
    assert watch.feed(ADDED)
    assert watch.feed(GRANTED)
    assert watch.feed(RUNNING)
    assert not watch.feed("WARNING: Using incubator modules: jdk.incubator.vector")
    assert not watch.feed("[spark] ERROR SparkContext: Error initializing SparkContext.")
    assert watch.snapshot() == (True, 1, 0, "", "127.0.0.1:43665")
    assert watch.feed(EXITED)
    assert watch.snapshot()[2:4] == (1, "EXITED (Command exited with code 1)")
    watch.reset()
    assert watch.snapshot() == (False, 0, 0, "", "")


def test_a_granted_executor_is_waited_for_however_slow_its_start() -> None:
    granted = _watch(CONNECTED, ADDED, GRANTED, RUNNING).snapshot()
    # a busy machine: the executor's JVM has not reached the driver after a minute
    assert executors_verdict(granted, 0, 60.0, 60.0, **WAITS) is None
    assert executors_verdict(granted, 1, 60.0, 60.0, **WAITS) is None
    # gone for good (cannot reach this driver): said, once a JVM start cannot explain it
    said = executors_verdict(granted, 0, 301.0, 301.0, **WAITS)
    assert said is not None
    assert said.startswith("gave this job an executor on 127.0.0.1:43665 that did not reach")


def test_no_grant_is_said_within_seconds() -> None:
    connected = _watch(CONNECTED).snapshot()
    assert executors_verdict(connected, 0, 6.0, 6.0, **WAITS) is None
    assert executors_verdict(connected, 0, 7.5, 7.5, **WAITS) == (
        "gave this job no executor within 7 s: start a worker with free cores (or one that "
        "can reach this machine), or use --master local[*]"
    )


def test_executors_that_end_are_said_unless_the_master_grants_another() -> None:
    ended = _watch(CONNECTED, GRANTED, EXITED).snapshot()
    assert executors_verdict(ended, 0, 5.0, 5.0, **WAITS) is None
    said = executors_verdict(ended, 0, 9.0, 8.0, **WAITS)
    assert said == (
        "granted this job executors that ended (EXITED (Command exited with code 1)): see the "
        "workers' logs, or use --master local[*]"
    )
    again = _watch(CONNECTED, GRANTED, EXITED, GRANTED).snapshot()
    assert executors_verdict(again, 0, 60.0, 1.0, **WAITS) is None


@pytest.mark.parametrize("waited", [10.0, 299.0])
def test_without_the_scheduler_s_lines_registration_alone_gets_the_long_wait(waited: float) -> None:
    """A log configuration of the user's own may keep the lines away: nothing is known but
    whether an executor registered."""
    unseen = ExecutorWatch().snapshot()
    assert executors_verdict(unseen, 0, waited, waited, **WAITS) is None
    assert executors_verdict(unseen, 0, 301.0, 301.0, **WAITS) is not None
