"""Every ``python`` block of the README and of ``docs/`` runs, as a user would paste it.

Each block runs in a process of its own, in a directory whose ``email.yml`` is an in-process
account (``intraprocess: true``): what a snippet does over email it does there in process.
An HTML comment right above a block may say more:

* ``<!-- prelude: CODE -->``: CODE runs first (the names a fragment takes from its page);
* ``<!-- runs until stopped -->``: the block is a program that runs until it is stopped (a
  node spinning): it must still be running, without an error, after a few seconds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(
    r"(?:<!--(?P<directive>(?:(?!-->).)*)-->\s*\n)?```python\n(?P<code>.*?)```", re.S
)
_UNTIL_STOPPED_S = 4.0


class Snippet(NamedTuple):
    page: str
    line: int
    code: str
    until_stopped: bool


def _snippets() -> list[Snippet]:
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for match in _BLOCK.finditer(text):
            directive = (match.group("directive") or "").strip()
            prelude = directive.removeprefix("prelude:") if directive.startswith("prelude:") else ""
            line = text.count("\n", 0, match.start("code")) + 1
            found.append(
                Snippet(
                    str(page.relative_to(ROOT)),
                    line,
                    prelude.strip() + "\n" + match.group("code"),
                    directive == "runs until stopped",
                )
            )
    return found


SNIPPETS = _snippets()


def test_the_pages_have_snippets() -> None:
    assert len(SNIPPETS) >= 8  # (a pattern that matched nothing would pass every page)


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"{s.page}:{s.line}" for s in SNIPPETS])
def test_a_documented_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    (tmp_path / "email.yml").write_text("email:\n  intraprocess: true\n")
    process = subprocess.Popen(
        [sys.executable, "-c", snippet.code],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=_UNTIL_STOPPED_S if snippet.until_stopped else 120)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        assert snippet.until_stopped, f"{snippet.page}:{snippet.line} did not end:\n{err}"
        assert "Traceback" not in err, f"{snippet.page}:{snippet.line}:\n{err}"
        return
    assert not snippet.until_stopped, f"{snippet.page}:{snippet.line} ended:\n{out}\n{err}"
    assert process.returncode == 0, f"{snippet.page}:{snippet.line}:\n{err}"


def _yaml_blocks() -> list[tuple[str, int, str]]:
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for match in re.finditer(r"```yaml\n(.*?)```", text, re.S):
            # (a fragment with "..." leaves out what the page says goes there)
            if match.group(1).startswith("email:") and "..." not in match.group(1):
                line = text.count("\n", 0, match.start(1)) + 1
                found.append((str(page.relative_to(ROOT)), line, match.group(1)))
    return found


YAML_BLOCKS = _yaml_blocks()


@pytest.mark.parametrize(("page", "line", "text"), YAML_BLOCKS,
                         ids=[f"{p}:{n}" for p, n, _ in YAML_BLOCKS])  # fmt: skip
def test_a_documented_configuration_loads(page: str, line: int, text: str, tmp_path: Path) -> None:
    """Every whole ``email:`` configuration the pages show is one emailmw accepts (its keys
    and values checked; no server is asked, no command run)."""
    from emailmw._core.config import load_options

    path = tmp_path / "email.yml"
    path.write_text(text)
    load_options(path)


def _permission_blocks() -> list[tuple[str, int, str]]:
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for match in re.finditer(r"```yaml\n(identities:.*?)```", text, re.S):
            line = text.count("\n", 0, match.start(1)) + 1
            found.append((str(page.relative_to(ROOT)), line, match.group(1)))
    return found


PERMISSION_BLOCKS = _permission_blocks()


def test_the_pages_show_permissions() -> None:
    assert len(PERMISSION_BLOCKS) >= 2


@pytest.mark.parametrize(("page", "line", "text"), PERMISSION_BLOCKS,
                         ids=[f"{p}:{n}" for p, n, _ in PERMISSION_BLOCKS])  # fmt: skip
def test_a_documented_permissions_file_loads(page: str, line: int, text: str) -> None:
    """Every permissions file the pages show is one emailmw accepts (grants, accounts)."""
    import yaml

    from emailmw._security import Permissions

    Permissions.from_mapping(yaml.safe_load(text), source=f"{page}:{line}")
