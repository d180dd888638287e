"""Tests against the real local mail server; the fixtures are in ``tests/conftest.py``."""

from __future__ import annotations

from tests.conftest import MakeContext

__all__ = ["MakeContext"]
