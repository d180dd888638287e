"""Shared command-line handling of the examples: where the config comes from, how many."""

from __future__ import annotations

import argparse


def parse_args(description: str, *, count: int = 5, name: str = "/chatter") -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--config",
        help="email.yml to use (default: EMAILMW_CONFIG_FILE, ./email.yml, ~/email.yml)",
    )
    parser.add_argument("--count", type=int, default=count, help="how many, then exit")
    parser.add_argument("--name", default=name, help="topic or service name")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each")
    return parser.parse_args()
