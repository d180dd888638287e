"""``emailmw security create-keystore|create-key|list-keys``: keystores and identities
(``docs/security.md``)."""

from __future__ import annotations

import argparse
import sys

from .._security import Keystore
from .common import Commands, verbs

__all__ = ["register"]


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "security",
        parents=[common],
        help="keystores and identities (docs/security.md)",
        description="Create and inspect keystores of Ed25519/X25519 identities. A context "
        "uses one through the security: section or EMAILMW_SECURITY_KEYSTORE and "
        "EMAILMW_SECURITY_IDENTITY.",
    )
    add = verbs(parser, common)
    add("create-keystore", run=create_keystore, help="make an empty keystore in DIR").add_argument(
        "keystore", metavar="DIR"
    )
    p = add("create-key", run=create_key, help="make identity NAME in the keystore DIR")
    p.add_argument("keystore", metavar="DIR")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--days", type=float, help="the key expires after this many days")
    add("list-keys", run=list_keys, help="the trusted identities of the keystore DIR").add_argument(
        "keystore", metavar="DIR"
    )


def create_keystore(args: argparse.Namespace) -> int:
    store = Keystore.create(args.keystore)
    print(f"keystore {store.path}: public/ (trusted keys), private/ (mode 700)")
    return 0


def create_key(args: argparse.Namespace) -> int:
    public = Keystore(args.keystore).create_key(args.name, days=args.days)
    print(f"{public.name} {public.fingerprint} expires {public.expiry_text()}")
    return 0


def list_keys(args: argparse.Namespace) -> int:
    store = Keystore(args.keystore)
    for public, has_private in store.list_keys():
        private = "private key here" if has_private else "public key only"
        print(f"{public.name}\t{public.fingerprint}\texpires {public.expiry_text()}\t{private}")
    for problem in store.problems:
        print(f"emailmw: warning: {problem}", file=sys.stderr)
    return 0
