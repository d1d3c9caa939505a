"""The default run's sample of a sweep (``@pytest.mark.sample(k)``, tests/helpers.py's ``mark_unsampled_slow``): which
cases run by default, which are left to ``pytest -m slow``."""

import itertools
from types import SimpleNamespace

import pytest

from helpers import mark_unsampled_slow


class _Case:
    """What mark_unsampled_slow reads of a collected test: its marks, its path and name, its parameters' indices."""

    def __init__(self, name, keep, indices):
        self.path, self.originalname = "tests/test_x.py", name
        self.callspec = SimpleNamespace(indices=indices)
        self.marks = [pytest.mark.sample(keep).mark] if keep else []

    def get_closest_marker(self, name):
        return next((m for m in reversed(self.marks) if m.name == name), None)

    def add_marker(self, marker):
        self.marks.append(marker.mark)

    def slow(self):
        return any(m.name == "slow" for m in self.marks)


def test_a_sample_keeps_every_value_of_short_axes_and_spreads_over_long_ones():
    cases = [_Case("t", 6, {"name": i, "shape": j}) for i, j in itertools.product(range(6), range(3))]
    mark_unsampled_slow(cases)
    kept = [(c.callspec.indices["name"], c.callspec.indices["shape"]) for c in cases if not c.slow()]
    assert len(kept) == 6
    assert {n for n, _ in kept} == set(range(6)) and {s for _, s in kept} == set(range(3))


def test_a_long_axis_is_spread_and_other_tests_are_left_alone():
    cases = [_Case("t", 4, {"n": i}) for i in range(20)] + [_Case("u", None, {"n": i}) for i in range(5)]
    mark_unsampled_slow(cases)
    assert [c.callspec.indices["n"] for c in cases[:20] if not c.slow()] == [0, 5, 10, 15]
    assert not any(c.slow() for c in cases[20:])


def test_a_sample_of_a_product_keeps_its_diagonal_and_a_large_one_keeps_it_all():
    cases = [_Case("t", 3, {"a": i, "b": j}) for i, j in itertools.product(range(2), range(2))]
    mark_unsampled_slow(cases)
    assert [tuple(c.callspec.indices.values()) for c in cases if not c.slow()] == [(0, 0), (1, 1)]
    cases = [_Case("t", 4, {"a": i, "b": j}) for i, j in itertools.product(range(2), range(2))]
    mark_unsampled_slow(cases)
    assert not any(c.slow() for c in cases)
