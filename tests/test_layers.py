"""The layer contract of docs/design.md, as ``make lint`` enforces it: the tree keeps it,
and an upward import breaks it, also one hidden inside a function or under TYPE_CHECKING."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")

UPWARD = {
    "inside a function": (
        "\n\ndef _upward() -> None:\n    from .._delivery.context import Context  # noqa\n"
    ),
    "under TYPE_CHECKING": (
        "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        "    from .._ros.node import Node  # noqa\n"
    ),
}


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # this copy of emailmw, not the installed
    return subprocess.run(
        [str(LINT), "--no-cache", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(
        ROOT / "emailmw", tree / "emailmw", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tree)
    return tree


def test_the_tree_keeps_the_layer_contract(tmp_path: Path) -> None:
    result = _lint(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize("hidden", sorted(UPWARD))
def test_an_upward_import_breaks_it(tmp_path: Path, hidden: str) -> None:
    tree = _copy(tmp_path)
    with (tree / "emailmw" / "_transport" / "budget.py").open("a") as module:
        module.write(UPWARD[hidden])
    result = _lint(tree)
    assert result.returncode != 0
    assert "emailmw._transport.budget -> emailmw." in result.stdout
