"""The StableHLO specification's examples (``../shared/reference/stablehlo-spec.md``) run through the importer
and the executor (interop.spec_examples): every runnable example passes, except the listed errata."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from interop import spec_examples

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
    assert passed >= 92, passed  # measured: 92 of 124 examples (22 skipped: no values, or types no signature gives)


def test_corrected_examples_run_and_say_so(outcomes):
    # Each correction of a typing error is used, and the examples it corrects pass, reporting it.
    by_op = {}
    for o in outcomes:
        by_op.setdefault(o.example.op, []).append(o)
    for op in spec_examples.CORRECTIONS:
        corrected = [o for o in by_op[op] if o.example.corrected]
        assert corrected, f"no example of {op} needed its correction: remove it from CORRECTIONS"
        for o in corrected:
            assert o.status == "passed" and "(corrected: " in o.message, (o.example.name, o.status, o.message)


def test_known_errata_still_fail(outcomes):
    # An entry that starts passing (a harness or toolkit fix) must leave the list.
    by_name = {o.example.name: o for o in outcomes}
    passing = [name for name in spec_examples.KNOWN if by_name.get(name) and by_name[name].status == "passed"]
    assert not passing, f"remove from interop.spec_examples.KNOWN: {passing}"
    missing = [name for name in spec_examples.KNOWN if name not in by_name]
    assert not missing, missing


def test_value_notation():
    v = spec_examples.parse_value
    assert v("[[1, 2], [3, 4]]") == [[1, 2], [3, 4]]
    assert v("[true, false]") == [True, False]
    assert v("[(1.0, 2.0), (3.0, -4.5)]") == [1 + 2j, 3 - 4.5j]
    assert v("[0x7FC00000, -inf, 2.5e-3]") == [("bits", 0x7FC00000), float("-inf"), 2.5e-3]
    with pytest.raises(ValueError):
        v("[1, 2")
