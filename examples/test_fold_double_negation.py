"""Test of the example plugin pass (run with ``pytest examples``; tests/test_passes.py runs it too)."""

import os

import numpy as np

import lowering
import passes
from xla_dialect import XlaBuilder

PLUGIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fold_double_negation.py")


def build():
    b = XlaBuilder("double_negation")
    x = b.parameter(0, "s32[4]")
    y = b.neg(b.neg(x))  # folds to x
    z = b.not_(b.not_(b.neg(y)))  # folds to -x
    b.add(y, z)
    return b.build()


def test_plugin_registers_and_folds():
    names = passes.load_plugin(PLUGIN)
    assert "fold-double-negation" in names
    assert "fold-double-negation" in passes.available_passes()
    module = build()
    x = np.array([1, -2, np.iinfo(np.int32).min, np.iinfo(np.int32).max], np.int32)
    (before,) = lowering.compile(module)(x)
    passes.run(module, "fold-double-negation,dce")
    text = str(module)
    assert text.count("hlo.negate") == 1 and "hlo.not" not in text
    (after,) = lowering.compile(module)(x)
    np.testing.assert_array_equal(before, after)


def test_plugin_loads_once():
    assert passes.load_plugin(PLUGIN) == passes.load_plugin(PLUGIN)
