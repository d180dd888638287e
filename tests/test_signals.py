"""A signal that arrives while the main thread holds a lock ends the program all the same.

Python runs a signal handler on the main thread between two of its bytecodes, possibly
inside a wait set's lock; a handler that then wakes the wait set (``init()``'s SIGINT and
SIGTERM handlers), or sets an Event the main thread is about to wait on (the gateway's,
the recorder's, the graph daemon's), waited for itself for ever, and so did every later
signal's handler: ros2 launch's SIGINT, then SIGTERM, then SIGKILL was the only way out.
The moments are rare under a real signal (one launch test in a few hundred); here they
are made certain by raising the signal at the worst instant.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SPIN_INTERRUPTED_IN_ITS_WAIT = textwrap.dedent("""\
    import signal, sys
    import emailmw

    # (as a program started from a terminal has it: a test runner started in the
    # background has SIGINT ignored, and its children inherit that)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from emailmw.std_msgs.msg import String

    emailmw.init({})
    node = emailmw.create_node('waiter')
    node.create_subscription(String, 'chatter', print, 10)
    guard = node.create_guard_condition(lambda: None)
    fired = []

    def is_ready(original=guard._core._is_ready):
        # (checked under the wait set's lock: the signal arrives while it is held)
        if not fired:
            fired.append(True)
            signal.raise_signal(signal.SIG{name})
        return original()

    guard._core._is_ready = is_ready
    try:
        emailmw.spin(node)
    except KeyboardInterrupt:
        print('interrupted', flush=True)
    print('spin returned', emailmw.ok(), flush=True)
""")


def _run(program: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                              check=False, timeout=60)  # fmt: skip
    except subprocess.TimeoutExpired as exc:  # (the process is killed by run())
        raise AssertionError(f"the program hung on its own lock: {exc.stderr!r}") from None


def test_sigterm_inside_a_spins_wait_ends_the_spin() -> None:
    done = _run(SPIN_INTERRUPTED_IN_ITS_WAIT.replace("{name}", "TERM"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["spin returned False"], done


def test_ctrl_c_inside_a_spins_wait_interrupts_it() -> None:
    done = _run(SPIN_INTERRUPTED_IN_ITS_WAIT.replace("{name}", "INT"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["interrupted", "spin returned False"], done


EVENT_SET_INSIDE_ITS_LOCK = textwrap.dedent("""\
    import signal, threading
    from emailmw._core.signalsafe import set_on_signals

    stop = threading.Event()
    set_on_signals(stop, (signal.SIGTERM,))
    with stop._cond:  # (what Event.wait holds for a moment)
        signal.raise_signal(signal.SIGTERM)
    print('stopped', stop.wait(30), flush=True)
""")


def test_a_signal_sets_an_event_whose_lock_the_interrupted_thread_holds() -> None:
    """The gateway's, the recorder's and the daemon's stop event: the signal lands while
    the main thread is inside the event's own lock (as in ``Event.wait``)."""
    done = _run(EVENT_SET_INSIDE_ITS_LOCK)
    assert (done.returncode, done.stdout) == (0, "stopped True\n"), done


SIGTERM_AFTER_A_SHUTDOWN_ON_ANOTHER_THREAD = textwrap.dedent("""\
    import os, signal, threading, time
    import emailmw

    emailmw.init({"intraprocess": True})
    closer = threading.Thread(target=emailmw.shutdown)  # (cannot put the handlers back)
    closer.start()
    closer.join()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
    print("still running")
""")


def test_sigterm_ends_a_program_whose_emailmw_was_shut_down_on_another_thread() -> None:
    """rclpy-style programs shut down from a thread (a spin thread, a callback): Python
    sets handlers on the main thread only, so emailmw's stay. A SIGTERM then does what it
    did before ``init()``: the process ends. Was: nothing happened (the handler, finding
    no context, called the previous handler only when it was a function)."""
    ran = subprocess.run([sys.executable, "-c", SIGTERM_AFTER_A_SHUTDOWN_ON_ANOTHER_THREAD],
                         check=False, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ran.returncode == -15, (ran.returncode, ran.stdout, ran.stderr)
    assert "still running" not in ran.stdout
