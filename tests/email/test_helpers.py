"""The helpers the email tests stand on: what a killed peer printed is all read.

Run as ``python -m tests.email.test_helpers print MARKER``: writes numbered lines at once
into a pipe made 1 MiB large (so that most are still in it when the test sees ``MARKER``), then
creates ``MARKER`` and sleeps (the peer a test kills)."""

from __future__ import annotations

import fcntl
import sys
import time
from pathlib import Path

from ..helpers import deadline_loop
from .helpers import Peer, unflagged_repeats

LINES = 150_000


def test_a_killed_peer_s_lines_are_read_to_the_end(tmp_path: Path) -> None:
    # (the matrix restarts a killed publisher after the last index it printed: a line
    # still in the pipe must not be taken for one it never printed)
    marker = tmp_path / "printed"
    peer = Peer("print", marker, "", module="tests.email.test_helpers")
    try:
        more = deadline_loop(60)
        while more() and not marker.exists():
            time.sleep(0.01)
        assert marker.exists(), "the printer never finished"
        peer.kill()
        assert len(peer.lines.items) == LINES
        assert peer.lines.items[-1] == str(LINES - 1)
    finally:
        peer.stop()


def test_a_repeat_is_one_unflagged_copy_whichever_member_printed_it_first() -> None:
    # (CI: two members of a group, the flagged copy (a spool's resend) listed first because
    # its member's lines come first, was called a repeat unflagged)
    flagged_first = [
        {"i": 11, "run": 0, "redelivered": True},
        {"i": 10, "run": 0, "redelivered": False},
        {"i": 11, "run": 0, "redelivered": False},
    ]
    assert unflagged_repeats(flagged_first) == {}
    twice = [*flagged_first, {"i": 10, "run": 0, "redelivered": False}]
    assert list(unflagged_repeats(twice)) == [(10, 0)]
    # (the same index published again by a restarted publisher is a second message)
    assert unflagged_repeats([*flagged_first, {"i": 10, "run": 1, "redelivered": False}]) == {}


if __name__ == "__main__":
    fcntl.fcntl(sys.stdout.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
    sys.stdout.write("".join(f"{i}\n" for i in range(LINES)))  # (at once, into the pipe)
    sys.stdout.flush()
    Path(sys.argv[2]).touch()
    time.sleep(600)
