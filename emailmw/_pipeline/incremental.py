"""Re-runs that land only the new mail (``emailmw analyze SOURCE --out DIR --since-last``,
or ``emailmw analyze DIR SOURCE --out DIR``): a source an earlier run landed in the same
output keeps that landing, and only what it gained since is landed, beside it
(``_landing/src=<digest>-inc-<ns>``); the tables are computed over both, emails landed
twice counted once.

What is new:

* a Maildir: the files whose key (the name before ``:2,``, as the landing keys them) no
  earlier landing of the source has;
* an mbox: the bytes after the size it had at its last landing, when it only grew: its
  first 64 KiB and the 64 KiB before that size are still what they were, and a ``From ``
  line begins at that size (a mail client's expunge rewrites the file: every message after
  the first one removed moves, so the bytes before the old size change, also when new mail
  makes the file larger than it was). One rewritten otherwise is landed again whole, as
  before (its emails matched with the earlier landing's by Message-ID, not by offset).

Pure but for reading the landings' keys (pyarrow) and the mbox's head and size.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, BinaryIO, Final

import pyarrow as pa

from .landing import LANDING_SCHEMA, MAILDIR_UNIT_FILES, Source, mbox_ranges_from

__all__ = ["incremental_sources", "mbox_states", "new_units", "record_mbox_states"]

_HEAD: Final = 64 << 10


def _state_path(landing: Path, digest: str) -> Path:
    return landing / f".mbox-state-{digest}.json"


def _digests(handle: BinaryIO, size: int) -> tuple[str, str]:
    """The digests of the first 64 KiB (at most ``size`` bytes) and of the 64 KiB before
    ``size`` (what ends the landed part) of the open mbox ``handle``."""
    handle.seek(0)
    head = hashlib.sha256(handle.read(min(size, _HEAD))).hexdigest()
    start = max(0, size - _HEAD)
    handle.seek(start)
    tail = hashlib.sha256(handle.read(size - start)).hexdigest()
    return head, tail


def only_grew(path: Path, state: dict[str, Any]) -> bool:
    """Whether the mbox ``path`` only gained mail at its end since ``state`` (its landed
    size, head and tail) was recorded: it is no smaller, its head and tail are unchanged,
    and a ``From `` line begins at the landed size (or nothing was added). One open."""
    landed = int(state.get("size", 0))
    try:
        with path.open("rb") as handle:
            if os.fstat(handle.fileno()).st_size < landed:
                return False
            if _digests(handle, landed) != (state.get("head"), state.get("tail")):
                return False
            handle.seek(landed)
            return handle.read(5) in (b"", b"From ")
    except OSError:
        return False


def mbox_states(archives: list[Source], units: pa.Table) -> dict[str, dict[str, Any]]:
    """Each mbox's landed size (where its last listed unit ends: bytes it gains after the
    listing are the next run's) and head."""
    ends: dict[str, int] = {}
    for digest, kind, end in zip(
        units.column("src").to_pylist(), units.column("kind").to_pylist(),
        units.column("end").to_pylist(), strict=True,
    ):  # fmt: skip
        if kind == "mbox" and end is not None:
            ends[digest] = max(ends.get(digest, 0), int(end))
    states = {}
    for source in archives:
        if source.kind == "mbox":
            size = ends.get(source.digest, 0)
            with source.path.open("rb") as handle:
                head, tail = _digests(handle, size)
            states[source.digest] = {"size": size, "head": head, "tail": tail}
    return states


def record_mbox_states(landing: Path, states: dict[str, dict[str, Any]]) -> None:
    """Remember the landed mboxes' states (for the next re-run)."""
    for digest, state in states.items():
        _state_path(landing, digest).write_text(json.dumps(state))


def incremental_sources(
    archives: list[Source], earlier: list[Path], landing: Path
) -> dict[str, Path]:
    """The sources whose earlier landing is in ``landing`` (this output's) and can be
    extended: digest -> that landing's directory."""
    here = {d.resolve() for d in earlier if d.parent.resolve() == landing.resolve()}
    found: dict[str, Path] = {}
    for source in archives:
        previous = landing / f"src={source.digest}"
        if previous.resolve() not in here:
            continue
        if source.kind == "mbox":
            try:
                state = json.loads(_state_path(landing, source.digest).read_text())
            except (OSError, ValueError):
                continue
            if not only_grew(source.path, state):
                continue  # rewritten, not grown: landed again whole
        found[source.digest] = previous
    return found


def _landed_keys(landing: Path, digest: str) -> set[tuple[str, str]]:
    """(mailbox, key) of every email the source's landings hold (a batch's or a part's
    suffix after ``#`` taken off)."""
    import pyarrow.dataset as ds

    keys: set[tuple[str, str]] = set()
    for directory in landing.glob(f"src={digest}*"):
        table = ds.dataset(str(directory), schema=LANDING_SCHEMA, format="parquet").to_table(
            columns=["mailbox", "key"]
        )
        for mailbox, key in zip(
            table.column("mailbox").to_pylist(), table.column("key").to_pylist(), strict=True
        ):
            keys.add((mailbox, str(key).partition("#")[0]))
    return keys


def new_units(
    units: pa.Table, archives: list[Source], incremental: dict[str, Path], landing: Path
) -> tuple[pa.Table, dict[str, str], dict[str, int]]:
    """``units`` with, for each incremental source, only what is new (see the module),
    under its own landing name; digest -> that name; and digest -> how many emails its
    earlier landings hold that the (Maildir) source no longer does (they stay counted)."""
    if not incremental:
        return units, {}, {}
    stamp = time.time_ns()
    names = {digest: f"{digest}-inc-{stamp}" for digest in incremental}
    by_digest = {a.digest: a for a in archives}
    rows: list[dict[str, Any]] = []
    mboxes_done: set[str] = set()
    keys_of: dict[str, set[tuple[str, str]]] = {}
    listed: dict[str, set[tuple[str, str]]] = {}
    packing: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for row in units.to_pylist():
        digest = row["src"]
        if digest not in incremental:
            rows.append(row)
            continue
        if row["kind"] == "maildir":
            keys = keys_of.get(digest)
            if keys is None:
                keys = keys_of[digest] = _landed_keys(landing, digest)
            seen = listed.setdefault(digest, set())
            for group in row["groups"]:
                seen.update((group["mailbox"], n.partition(":2,")[0]) for n in group["names"])
                fresh = [n for n in group["names"]
                         if (group["mailbox"], n.partition(":2,")[0]) not in keys]  # fmt: skip
                if fresh:  # (the new files of several units go in as few as they fill)
                    pending = packing.setdefault(digest, ({**row, "src": names[digest]}, []))
                    pending[1].append({**group, "names": fresh})
            continue
        if digest in mboxes_done:
            continue
        mboxes_done.add(digest)
        source = by_digest[digest]
        state = json.loads(_state_path(landing, digest).read_text())
        for start, end in mbox_ranges_from(source.path, int(state["size"])):
            rows.append({**row, "src": names[digest], "start": start, "end": end})
    for template, groups in packing.values():
        unit: list[dict[str, Any]] = []
        size = 0
        for group in groups:
            if unit and size + len(group["names"]) > MAILDIR_UNIT_FILES:
                rows.append({**template, "groups": unit})
                unit, size = [], 0
            unit.append(group)
            size += len(group["names"])
        if unit:
            rows.append({**template, "groups": unit})
    removed = {
        digest: len(keys_of.get(digest, set()) - listed.get(digest, set()))
        for digest in incremental
        if by_digest[digest].kind == "maildir"
    }
    return pa.Table.from_pylist(rows, schema=units.schema), names, removed
