"""``xla_dialect.cse``: XLA's common-subexpression model, its keys and its cost on graphs of shared values."""

from __future__ import annotations

import numpy as np

from interop import import_jax
from xla_dialect.cse import CseNumbering


def _powers(x):
    y = x
    for _ in range(10):  # (each value read three times by the next: 3**10 paths from the result to x)
        y = y * y + y
    return y, x * x + x  # (the second result is XLA's first y again)


def _result_values():
    module = import_jax(_powers, np.ones(4, np.float32))
    return [op for op in module.walk() if op.name == "func.return"][0].operands


def test_a_depth_limited_numbering_keys_each_value_once_per_depth(monkeypatch):
    # The scalar kernels number a select's operands 8 ops deep; a value reached along many paths was keyed again
    # on each (3**8 keys here; a third of lowering.compile's time on betainc's program).
    calls = []
    original = CseNumbering._key
    monkeypatch.setattr(CseNumbering, "_key",
                        lambda self, value, depth: calls.append(1) or original(self, value, depth))
    last, first = _result_values()
    numbering = CseNumbering(max_depth=8)
    numbering.number(last)
    assert len(calls) <= 8 * 25, len(calls)  # (at most each of the ~25 values once per depth)


def test_numbers_are_xlas_merges_with_and_without_a_depth_limit():
    module = import_jax(_powers, np.ones(4, np.float32))
    adds = [op.results[0] for op in module.walk() if op.name == "hlo.add"]
    assert len(adds) == 11  # (the chain's ten, then the second result's)
    for depth in (None, 12):
        numbering = CseNumbering(max_depth=depth)
        # jax writes x * x + x once inside the chain and once more for the second result: XLA merges them
        assert numbering.same(adds[0], adds[-1]), depth
        assert not numbering.same(adds[1], adds[-1]) and not numbering.same(adds[9], adds[0]), depth
