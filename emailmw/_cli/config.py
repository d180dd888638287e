"""``emailmw config show``: the configuration as emailmw loaded it (a provider profile's
values filled in), secrets redacted."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .._core.config import find_config_file, load_options, read_yaml
from .._core.log import redact
from .._core.providers import PROVIDERS, filled_in, with_profile
from .common import CommandError, Commands

__all__ = ["register", "shown"]

#: the words of a key whose value is a secret, or a command that prints one
_SECRET_WORDS = ("password", "secret", "token")


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "config",
        help="the loaded configuration: show",
        description="The configuration emailmw uses.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    show = verbs.add_parser(
        "show",
        parents=[common],
        help="print the configuration as loaded: a provider's values filled in, secrets hidden",
        description=(
            "Print the configuration file emailmw reads (--config, else EMAILMW_CONFIG_FILE, "
            "else ./email.yml) as it is loaded: what a provider: profile fills in is written "
            "out and marked, passwords, tokens, secrets and the commands that print them "
            "show as <redacted>. The file is checked first: a mistake is one line."
        ),
    )
    show.set_defaults(run=run_show)


def shown(data: Mapping[str, Any]) -> str:
    """The configuration ``data`` (a file's mapping) as YAML, as emailmw loads it: the
    ``email:`` mapping with its profile's values (each marked ``# from provider NAME``) and
    every secret redacted."""
    wrapped = "email" in data
    email = data["email"] if wrapped else data
    provider = PROVIDERS.get(str(email.get("provider"))) if isinstance(email, Mapping) else None
    marks: set[str] = set()
    if provider is not None and isinstance(email, Mapping):
        marks = {key for key, _ in filled_in(email, provider)}
        email = with_profile(email, provider)
    out = {**data, "email": email} if wrapped else email
    text = yaml.safe_dump(_redacted(out), sort_keys=False, default_flow_style=False)
    if provider is not None:
        text = _marked(text, marks, provider.name)
    return text


def _redacted(value: Any, key: str = "") -> Any:
    if isinstance(value, Mapping):
        return {k: _redacted(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, key) for v in value]
    if any(word in key.lower() for word in _SECRET_WORDS) and value is not None:
        return "<redacted>"
    # (a value holding a secret this process knows, in any key; keys are never redacted:
    # a password "secret" made 'client-secret' read 'client-***')
    return redact(value) if isinstance(value, str) else value


def _marked(text: str, marks: set[str], provider: str) -> str:
    """``text`` (YAML) with ``# from provider NAME`` after each line of a key in ``marks``
    (``user.url-smtp``: the key ``url-smtp`` under ``user:``)."""
    lines: list[str] = []
    path: list[str] = []
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        depth = (len(line) - len(stripped)) // 2
        key = stripped.split(":", 1)[0]
        path = [*path[:depth], key]
        dotted = ".".join(path[1:] if path and path[0] == "email" else path)
        lines.append(f"{line}  # from provider {provider}" if dotted in marks else line)
    return "\n".join(lines) + "\n"


def run_show(args: argparse.Namespace) -> int:
    given = getattr(args, "config", None)
    path = Path(given) if given is not None else find_config_file()
    if path is None:
        raise CommandError(
            "no configuration file: give --config FILE or EMAILMW_CONFIG_FILE, or write "
            "./email.yml (README: Configuration)"
        )
    load_options(path)  # (its mistakes, one line each, before anything is printed)
    data = read_yaml(path)
    print(f"# {path}")
    print(shown(data), end="")
    return 0
