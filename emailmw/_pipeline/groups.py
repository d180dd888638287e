"""The ``group_stats`` table: what each member of each delivery-mode group processed
(``docs/delivery-modes.md``), from where the group left it.

A member moves what it processed into its own done folder, ``emailmw-GROUP-done-MEMBER``,
so an archive of the group's account says who processed what. A message that reached a
member after another member failed holding it carries the keyword ``DeliveryN`` (N >= 2):
in a Dovecot Maildir, a lower-case letter in the file name's flags, mapped to its keyword by
the folder's ``dovecot-keywords`` file. ``redelivered`` counts those; it is null where the
archive does not say (an mbox, a merge of earlier output).

Computed with pyarrow from the ``messages`` table's ``mailbox``, ``key`` and ``source``
columns (no Spark job: the table has one row per member).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = ["GROUP_STATS_SCHEMA", "group_stats", "write_group_stats"]

GROUP_STATS_SCHEMA: Final = pa.schema(
    [
        ("group", pa.string()),
        ("member", pa.string()),
        ("processed", pa.int64()),
        ("redelivered", pa.int64()),  # null: the archive does not keep keywords
        ("mailbox", pa.string()),
    ]
)
_DONE: Final = re.compile(
    r"(?:^|[./])emailmw-(?P<group>[A-Za-z0-9_]{1,40})-done-(?P<member>[0-9a-f]{8})(?:\.mbox)?$"
)
_DELIVERY: Final = re.compile(r"^Delivery(\d{1,3})$")


def _redelivered_keys(folder: Path) -> set[str] | None:
    """The files (by key: the name without its flags) of Maildir ``folder`` that carry a
    ``DeliveryN`` keyword with N >= 2: Dovecot keeps keywords as lower-case letters in the
    name's flags (``:2,ab``), mapped by ``dovecot-keywords`` (``index keyword`` per line,
    index 0 = letter a). None where the folder keeps no keywords (unknown)."""
    try:
        lines = (folder / "dovecot-keywords").read_text(errors="replace").splitlines()
    except OSError:
        return None
    letters = set()
    for line in lines:
        index, _, keyword = line.partition(" ")
        found = _DELIVERY.match(keyword.strip())
        if index.isdigit() and int(index) < 26 and found and int(found.group(1)) >= 2:
            letters.add(chr(ord("a") + int(index)))
    keys = set()
    for sub in ("cur", "new"):
        try:
            names = [entry.name for entry in os.scandir(folder / sub)]
        except OSError:
            continue
        for name in names:
            key, _, flags = name.partition(":2,")
            if letters & set(flags):
                keys.add(key)
    return keys


def group_stats(messages: pa.Table, roots: dict[str, Path]) -> pa.Table:
    """``group_stats`` of the ``messages`` rows (``mailbox``, ``key``, ``source``);
    ``roots``: source label -> the Maildir root it was read from (for the keywords)."""
    if messages.num_rows == 0:
        return GROUP_STATS_SCHEMA.empty_table()
    mailboxes = messages["mailbox"]
    mask = pc.match_substring_regex(mailboxes, r"emailmw-[A-Za-z0-9_]+-done-[0-9a-f]{8}")
    rows = messages.filter(pc.fill_null(mask, False)).to_pylist()
    stats: dict[tuple[str, str, str], dict[str, Any]] = {}
    redelivered_in: dict[tuple[str, str], set[str] | None] = {}
    for row in rows:
        found = _DONE.search(row["mailbox"] or "")
        if found is None:
            continue
        key = (found.group("group"), found.group("member"), row["mailbox"])
        entry = stats.setdefault(key, {"processed": 0, "redelivered": 0, "known": True})
        entry["processed"] += 1
        where = (row["source"], row["mailbox"])
        if where not in redelivered_in:
            root = roots.get(row["source"] or "")
            folder = None if root is None else (
                root if root.name == row["mailbox"] else root / row["mailbox"]
            )  # fmt: skip
            redelivered_in[where] = None if folder is None else _redelivered_keys(folder)
        keys = redelivered_in[where]
        if keys is None:
            entry["known"] = False
        elif row["key"] in keys:
            entry["redelivered"] += 1
    out = [
        {"group": g, "member": m, "processed": e["processed"],
         "redelivered": e["redelivered"] if e["known"] else None, "mailbox": mailbox}
        for (g, m, mailbox), e in sorted(stats.items())
    ]  # fmt: skip
    return pa.Table.from_pylist(out, schema=GROUP_STATS_SCHEMA)


def write_group_stats(out: Path, roots: dict[str, Path]) -> pa.Table:
    """Compute ``group_stats`` from ``out/messages`` and write it to ``out/group_stats``."""
    directory = out / "messages"
    table = GROUP_STATS_SCHEMA.empty_table()
    if directory.is_dir() and any(directory.rglob("*.parquet")):
        # the mailbox column alone first (dictionary-encoded: cheap); the rest only when
        # some group's done folder is among them
        labels = pq.read_table(directory, columns=["mailbox"])["mailbox"].unique()
        if pc.any(pc.fill_null(pc.match_substring(labels, "-done-"), False)).as_py():
            messages = pq.read_table(directory, columns=["mailbox", "key", "source"])
            table = group_stats(messages, roots)
    target = out / "group_stats"
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.parquet"):
        old.unlink()
    pq.write_table(table, target / "part-00000.zstd.parquet", compression="zstd")
    (target / "_SUCCESS").touch()
    return table
