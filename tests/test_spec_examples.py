"""The StableHLO specification's examples (``../shared/reference/stablehlo-spec.md``) run through the importer
and the executor (interop.tools.spec_examples): every runnable example passes, except the listed errata."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from interop.tools import spec_examples

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def outcomes():
    path = REPO.parent / "shared" / "reference" / "stablehlo-spec.md"
    if not path.is_file():
        message = f"the StableHLO specification is not at {path}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return spec_examples.run_spec(str(path))


def test_every_runnable_example_passes(outcomes):
    bad = [f"{o.example.name}: {o.message}" for o in outcomes
           if o.status in ("failed", "error") and o.example.name not in spec_examples.KNOWN]
    assert not bad, "\n".join(bad)
    passed = sum(o.status == "passed" for o in outcomes)
    assert passed >= 93, passed  # measured: 93 of 124 examples
    compiled = sorted(o.example.name for o in outcomes if o.status == "compiled")
    # Ops whose examples give no values: imported, verified and compiled (on their replica groups' grid).
    assert compiled == ["after_all[0]", "async_done[0]", "async_start[0]", "infeed[0]", "outfeed[0]",
                        "partition_id[0]", "recv[0]", "replica_id[0]", "send[0]"], compiled


def test_an_example_without_values_that_does_not_compile_is_an_error():
    example = spec_examples.Example("add", 0, ['%result = "stablehlo.add"(%a, %b) : (tensor<2xf32>, tensor<3xf32>) '
                                               '-> tensor<2xf32>'])
    outcome = spec_examples.run_example(example)
    assert outcome.status == "error", outcome
    example = spec_examples.Example("replica_id", 0, ['%result = "stablehlo.replica_id"() : () -> tensor<ui32>'])
    assert spec_examples.run_example(example).status == "compiled"


def test_corrected_examples_run_and_say_so(outcomes):
    # Each correction of a typing error is used, and the examples it corrects pass, reporting it.
    by_op = {}
    for o in outcomes:
        by_op.setdefault(o.example.op, []).append(o)
    for op in spec_examples.CORRECTIONS:
        corrected = [o for o in by_op[op] if o.example.corrected]
        assert corrected, f"no example of {op} needed its correction: remove it from CORRECTIONS"
        for o in corrected:
            if o.example.name in spec_examples.KNOWN:
                continue  # (corrected, and still an erratum for another, listed reason)
            assert o.status == "passed" and "(corrected: " in o.message, (o.example.name, o.status, o.message)


def test_known_errata_still_fail(outcomes):
    # An entry that starts passing (a harness or toolkit fix) must leave the list.
    by_name = {o.example.name: o for o in outcomes}
    passing = [name for name in spec_examples.KNOWN if by_name.get(name) and by_name[name].status == "passed"]
    assert not passing, f"remove from interop.tools.spec_examples.KNOWN: {passing}"
    missing = [name for name in spec_examples.KNOWN if name not in by_name]
    assert not missing, missing


def test_value_notation():
    v = spec_examples.parse_value
    assert v("[[1, 2], [3, 4]]") == [[1, 2], [3, 4]]
    assert v("[true, false]") == [True, False]
    assert v("[(1.0, 2.0), (3.0, -4.5)]") == [[1.0, 2.0], [3.0, -4.5]]
    assert all(isinstance(p, spec_examples.Parenthesized) for p in v("[(1.0, 2.0), (3.0, -4.5)]"))
    np.testing.assert_array_equal(spec_examples.to_array(v("[(1.0, 2.0), (3.0, -4.5)]"), "tensor<2xcomplex<f32>>"),
                                  np.array([1 + 2j, 3 - 4.5j], np.complex64))
    pair = spec_examples.to_array(v("([1.0, 2.0], (3))"), "tuple<tensor<2xf64>, tuple<tensor<i64>>>")
    assert isinstance(pair, tuple) and isinstance(pair[1], tuple)
    np.testing.assert_array_equal(pair[0], np.array([1.0, 2.0]))
    assert pair[1][0].dtype == np.int64 and pair[1][0].shape == () and pair[1][0] == 3
    with pytest.raises(ValueError):
        spec_examples.to_array(v("(1.0, 2.0)"), "tensor<f32>")  # parentheses around a real
    with pytest.raises(ValueError):
        spec_examples.to_array(v("([1.0, 2.0])"), "tuple<tensor<2xf64>, tensor<i64>>")  # one element of two
    assert v("[0x7FC00000, -inf, 2.5e-3]") == [("bits", 0x7FC00000), float("-inf"), 2.5e-3]
    with pytest.raises(ValueError):
        v("[1, 2")
