"""HLO text import (issue 29): malformed attribute and literal text is a diagnostic that says what is wrong,
not a raw Python error (``ValueError: invalid literal for int()``, numpy's ``axes don't match array``, or an
uncaught ``OverflowError: Python integer -1 out of bounds for uint64``) dressed as a malformed instruction."""

from __future__ import annotations

import re

import pytest

from interop.hlo import import_hlo
from xla_dialect.errors import HloParseError

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

"""


def _module(body: str) -> str:
    return "HloModule m\n\n" + ADD + "ENTRY main {\n  p = f32[3] parameter(0)\n  " + body + "\n}\n"


CASES = [
    # replica groups / pairs with a non-integer id (was: ValueError: invalid literal for int())
    ("ROOT c = f32[3] all-reduce(p), replica_groups={{0,x}}, to_apply=add",
     "attribute replica_groups: expected integers in '{{0,x}}', got 'x'"),
    ("ROOT c = f32[3] collective-permute(p), source_target_pairs={{0,y}}",
     "attribute source_target_pairs: expected integers in '{{0,y}}', got 'y'"),
    # iota replica groups whose transpose does not fit (was: ValueError: axes don't match array)
    ("ROOT c = f32[3] all-reduce(p), replica_groups=[2,2]<=[4]T(1,0), to_apply=add",
     "T(1,0) is not a permutation of the 1 dimensions of [4]"),
    # ... or repeats an axis (was: ValueError: repeated axis in transpose)
    ("ROOT c = f32[3] all-reduce(p), replica_groups=[2,2]<=[2,2]T(0,0), to_apply=add",
     "T(0,0) is not a permutation of the 2 dimensions of [2,2]"),
    # integer constants out of range name the value and the type
    ("ROOT c = u64[] constant(-3)", "constant -3 is out of range for u64 (0 to 18446744073709551615)"),
    ("ROOT c = s8[2] constant({1, 300})", "constant 300 is out of range for s8 (-128 to 127)"),
    # sub-byte types (was: an uncaught OverflowError: Python integer -1 out of bounds for uint64)
    ("ROOT c = u4[] constant(-1)", "constant -1 is out of range for u4 (0 to 15)"),
    ("ROOT c = u2[2] constant({1, -1})", "constant -1 is out of range for u2 (0 to 3)"),
    # (was: accepted and wrapped around)
    ("ROOT c = s4[] constant(9)", "constant 9 is out of range for s4 (-8 to 7)"),
]


@pytest.mark.parametrize("body, message", CASES, ids=[c[1][:40] for c in CASES])
def test_malformed_text_names_what_is_wrong(body, message):
    with pytest.raises(HloParseError) as info:
        import_hlo(_module(body), source="bad.hlo")
    text = str(info.value)
    assert text.startswith("bad.hlo:11:3: %c ("), text
    assert message in text, text
    assert "malformed instruction" not in text and not re.search(r"\b(ValueError|OverflowError)\b", text), text


def test_in_range_sub_byte_constants_still_import():
    import lowering

    module = import_hlo(_module("ROOT c = s4[3] constant({-8, 0, 7})"))
    (out,) = lowering.compile(module)(__import__("numpy").zeros(3, "float32"))
    assert [int(v) for v in out] == [-8, 0, 7]
