"""The combination matrix covers what it says (#57): every valid pair of the factors' values
in ``make test``'s rows, every valid triple in ``EMAILMW_MATRIX=full``'s, each row valid,
the fixed rows first. The valid choices are counted here from the factors, apart from the
generator's own reckoning. No server."""

from __future__ import annotations

import itertools

import pytest

from tests.email.test_matrix import FACTORS, FIXED, covering


def _valid(row: dict[str, str]) -> bool:
    return row.get("on_receive", "keep") == "keep" or row.get("delivery", "plain") == "plain"


@pytest.mark.parametrize("strength", [2, 3])
def test_the_rows_cover_every_valid_choice_of_values(strength: int) -> None:
    rows = covering(strength)
    assert rows[: len(FIXED)] == FIXED
    assert all(set(row) == set(FACTORS) and _valid(row) for row in rows)
    missing = []
    for names in itertools.combinations(FACTORS, strength):
        for values in itertools.product(*(FACTORS[name] for name in names)):
            chosen = dict(zip(names, values, strict=True))
            if _valid(chosen) and not any(all(row[n] == v for n, v in chosen.items())
                                          for row in rows):  # fmt: skip
                missing.append(chosen)
    assert not missing, missing[:5]
    if strength == 2:  # (the constraint asks 25 rows at least: see covering)
        assert len(rows) <= 26
