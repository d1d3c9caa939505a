"""Tuples, call, while and conditional: builder, verifier, round trip, and execution vs jax.lax."""

import jax
import numpy as np
import pytest
from jax import lax

from helpers import assert_close, execute
from xla_dialect import XlaBuilder, format_shape, parse_module
from xla_dialect.errors import BuilderError, HloVerifyError

# ----------------------------------------------------------------------------
# Tuple / GetTupleElement
# ----------------------------------------------------------------------------


def test_tuple_seed_example():
    # let t: (f32[10], s32) = tuple(v, s); let element_1: s32 = gettupleelement(t, 1);
    b = XlaBuilder("tuple")
    v = b.constant(np.arange(10, dtype=np.float32))
    s = b.constant(np.int32(5))
    t = b.tuple([v, s])
    assert format_shape(t.type, False) == "(f32[10], s32[])"
    element_1 = b.get_tuple_element(t, 1)
    assert format_shape(element_1.type, False) == "s32[]"
    module = b.build([t, element_1])
    tv, ts, e1 = execute(module)  # tuple results are flattened
    np.testing.assert_array_equal(tv, np.arange(10, dtype=np.float32))
    assert ts == 5 and e1 == 5 and e1.dtype == np.int32


def test_nested_tuples_and_empty_tuple():
    b = XlaBuilder("nested")
    x = b.parameter(0, "f32[2]")
    y = b.parameter(1, "s8[]")
    inner = b.tuple([x, y])
    outer = b.tuple([inner, b.tuple([]), x])
    assert format_shape(outer.type, False) == "((f32[2], s8[]), (), f32[2])"
    got = b.get_tuple_element(b.get_tuple_element(outer, 0), 1)
    (r,) = execute(b.build(got), np.ones(2, np.float32), np.int8(-3))
    assert r == -3 and r.dtype == np.int8


def test_tuple_errors():
    b = XlaBuilder("bad")
    x = b.parameter(0, "f32[2]")
    t = b.tuple([x, x])
    with pytest.raises(BuilderError, match=r"index 2 is out of range for a tuple of 2 elements"):
        b.get_tuple_element(t, 2)
    with pytest.raises(BuilderError, match="operand must be a tuple, got f32\\[2\\]"):
        b.get_tuple_element(x, 0)


# ----------------------------------------------------------------------------
# While
# ----------------------------------------------------------------------------


def while_seed_module(limit=1000):
    """The XLA operation semantics's loop: (iteration, vector) += (1, constant_vector) while iteration < limit."""
    b = XlaBuilder("while")
    init = b.tuple([b.constant(np.int32(0)), b.constant(np.zeros(10, np.float32))])

    def condition(state):
        sb = state.builder
        return sb.lt(sb.get_tuple_element(state, 0), sb.constant(np.int32(limit)))

    def body(state):
        sb = state.builder
        iteration = sb.add(sb.get_tuple_element(state, 0), sb.constant(np.int32(1)))
        new_vector = sb.add(sb.get_tuple_element(state, 1), sb.constant(np.arange(10, dtype=np.float32)))
        return sb.tuple([iteration, new_vector])

    b.while_(condition, body, init)
    return b.build()


def test_while_seed_example_matches_jax():
    count, vector = execute(while_seed_module())
    expected = jax.jit(lambda: lax.while_loop(lambda s: s[0] < 1000,
                                              lambda s: (s[0] + 1, s[1] + np.arange(10, dtype=np.float32)),
                                              (np.int32(0), np.zeros(10, np.float32))))()
    assert count == 1000
    assert_close(count, np.asarray(expected[0]))
    assert_close(vector, np.asarray(expected[1]))


def test_while_condition_false_at_start():
    count, vector = execute(while_seed_module(limit=0))
    assert count == 0
    np.testing.assert_array_equal(vector, np.zeros(10, np.float32))


@pytest.mark.parametrize("n", [0, 1, 2, 17])
def test_while_with_parameters_and_tuple_state_matches_jax(rng, n):
    # Fibonacci-like recurrence with an input-dependent trip count and a captured parameter.
    x = rng.standard_normal(4).astype(np.float64)
    b = XlaBuilder("loop")
    px = b.parameter(0, "f64[4]")
    limit = b.parameter(1, "s64[]")
    init = b.tuple([b.constant(0, np.int64), px, b.neg(px)])

    def condition(s):
        sb = s.builder
        return sb.lt(sb.get_tuple_element(s, 0), limit)  # captures an outer value

    def body(sb, s):
        i, a, c = (sb.get_tuple_element(s, k) for k in range(3))
        return sb.tuple([sb.add(i, sb.constant(1, np.int64)), c, sb.add(sb.mul(a, sb.constant(0.5, np.float64)), c)])

    b.while_(condition, body, init)
    got = execute(b.build(), x, np.int64(n))
    expected = jax.jit(lambda v, m: lax.while_loop(lambda s: s[0] < m, lambda s: (s[0] + 1, s[2], s[1] * 0.5 + s[2]),
                                                   (np.int64(0), v, -v)))(x, np.int64(n))
    for g, e in zip(got, expected):
        assert_close(g, np.asarray(e), max_ulp=2)  # a*0.5 + c: XLA may contract into an FMA


def test_while_with_several_state_values_returns_a_tuple_of_xlaops():
    b = XlaBuilder("multi")
    i0 = b.constant(np.int32(0))
    acc0 = b.constant(np.int32(1))
    i, acc = b.while_(lambda i, a: i.builder.lt(i, i.builder.constant(np.int32(10))),
                      lambda i, a: (i + i.builder.constant(np.int32(1)), a + a), [i0, acc0])
    got = execute(b.build([i, acc]))
    assert got[0] == 10 and got[1] == 1024


def test_while_computations_as_built_modules():
    state = "(s32[], s32[])"
    cond_b = XlaBuilder("cond")
    s = cond_b.parameter(0, state)
    cond_b.lt(cond_b.get_tuple_element(s, 0), cond_b.constant(np.int32(5)))
    cond = cond_b.build()
    body_b = XlaBuilder("body")
    s = body_b.parameter(0, state)
    i, a = body_b.get_tuple_element(s, 0), body_b.get_tuple_element(s, 1)
    body_b.tuple([body_b.add(i, body_b.constant(np.int32(1))), body_b.mul(a, body_b.constant(np.int32(3)))])
    body = body_b.build()
    b = XlaBuilder("main")
    b.while_(cond, body, b.tuple([b.constant(np.int32(0)), b.constant(np.int32(1))]))
    got = execute(b.build())
    assert got == (5, 243)


def test_while_errors():
    b = XlaBuilder("bad")
    x = b.parameter(0, "s32[]")
    with pytest.raises(BuilderError, match=r"condition computation must return pred\[\], returns \(s32\[\]\)"):
        b.while_(lambda s: s, lambda s: s, x)
    with pytest.raises(BuilderError, match=r"body computation returns \(f32\[\]\) but must return \(s32\[\]\)"):
        b.while_(lambda s: s.builder.lt(s, s), lambda s: s.builder.constant(np.float32(0)), x)


# ----------------------------------------------------------------------------
# Conditional
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("pred", [True, False])
def test_conditional_pred_form_matches_jax_cond(rng, pred):
    x = rng.standard_normal(5).astype(np.float32)
    y = rng.integers(-9, 9, 5).astype(np.int32)
    b = XlaBuilder("cond")
    p = b.parameter(0, "pred[]")
    px = b.parameter(1, "f32[5]")
    py = b.parameter(2, "s32[5]")
    # Different operand types per branch (f32[5] and a tuple), one result type.
    b.conditional(p, px, lambda a: a.builder.neg(a),
                  b.tuple([px, py]), lambda t: t.builder.mul(t.builder.get_tuple_element(t, 0), px))
    (got,) = execute(b.build(), np.bool_(pred), x, y)
    expected = jax.jit(lambda q, u: lax.cond(q, lambda: -u, lambda: u * u))(pred, x)
    assert_close(got, np.asarray(expected))


def test_conditional_with_tuple_operand_and_captures():
    b = XlaBuilder("cond")
    p = b.parameter(0, "pred[]")
    x = b.parameter(1, "s32[3]")
    k = b.parameter(2, "s32[]")
    t = b.tuple([x, k])

    def true_branch(sb, s):
        return sb.tuple([sb.get_tuple_element(s, 0), sb.add(sb.get_tuple_element(s, 1), k)])

    def false_branch(sb, v):
        return sb.tuple([sb.mul(v, v), k])

    b.conditional(p, t, true_branch, x, false_branch)
    module = b.build()
    xs = np.array([1, -2, 3], np.int32)
    got_t = execute(module, np.bool_(True), xs, np.int32(4))
    got_f = execute(module, np.bool_(False), xs, np.int32(4))
    np.testing.assert_array_equal(got_t[0], xs)
    assert got_t[1] == 8
    np.testing.assert_array_equal(got_f[0], xs * xs)
    assert got_f[1] == 4


def branch_module(n):
    b = XlaBuilder("switch")
    index = b.parameter(0, "s32[]")
    x = b.parameter(1, "f32[4]")
    branches = [lambda a, k=k: a * a.builder.constant(np.float32(k + 1)) for k in range(n)]
    b.conditional(index, branches, [x] * n)
    return b.build()


@pytest.mark.parametrize("n", [1, 3])
def test_conditional_branch_index_in_range_matches_jax_switch(rng, n):
    x = rng.standard_normal(4).astype(np.float32)
    module = branch_module(n)
    for i in range(n):
        (got,) = execute(module, np.int32(i), x)
        expected = jax.jit(lambda j, v: lax.switch(j, [lambda u, k=k: u * np.float32(k + 1) for k in range(n)], v))(
            np.int32(i), x)
        assert_close(got, np.asarray(expected))


def test_conditional_out_of_range_index_runs_the_last_branch():
    # XLA's rule (XLA operation semantics): index < 0 or >= N runs branch N-1. jax.lax.switch
    # clamps the index itself (so -1 would run branch 0 there); XLA's own rule is tested.
    module = branch_module(3)
    x = np.array([1, 2, 3, 4], np.float32)
    for index in (-1, -100, 3, 7, np.iinfo(np.int32).max, np.iinfo(np.int32).min):
        (got,) = execute(module, np.int32(index), x)
        np.testing.assert_array_equal(got, x * 3, err_msg=f"index {index}")
    (got,) = execute(module, np.int32(1), x)
    np.testing.assert_array_equal(got, x * 2)


def test_conditional_index_rule_matches_xla_cpu():
    from interop.stablehlo import run_xla

    module = branch_module(3)
    x = np.array([1, 2, 3, 4], np.float32)
    for index in (-5, -1, 0, 1, 2, 3, 99):
        np.testing.assert_array_equal(execute(module, np.int32(index), x)[0],
                                      run_xla(module, np.int32(index), x)[0])


def test_conditional_branches_as_built_modules():
    subs = []
    for k in range(2):
        sb = XlaBuilder(f"branch{k}")
        p = sb.parameter(0, "s32[]")
        sb.add(p, sb.constant(np.int32(10 * (k + 1))))
        subs.append(sb.build())
    b = XlaBuilder("main")
    i = b.parameter(0, "s32[]")
    b.conditional(i, subs, [i, i])
    module = b.build()
    assert [execute(module, np.int32(v))[0] for v in (0, 1, 2)] == [10, 21, 22]


def test_conditional_errors():
    b = XlaBuilder("bad")
    p = b.parameter(0, "pred[]")
    i = b.parameter(1, "s32[]")
    x = b.parameter(2, "f32[2]")
    with pytest.raises(BuilderError, match=r"pred must be a pred\[\] scalar, got s32\[\]"):
        b.conditional(i, x, lambda a: a, x, lambda a: a)
    with pytest.raises(BuilderError, match=r"branch_index must be an s32\[\] scalar, got s64\[\]"):
        b.conditional(b.constant(0, np.int64), [lambda a: a], [x])
    with pytest.raises(BuilderError, match="branch computation 1 returns .*all branches must return the same type"):
        b.conditional(p, x, lambda a: a, i, lambda a: a)
    with pytest.raises(BuilderError, match="2 branch computations but 1 branch operands"):
        b.conditional(i, [lambda a: a, lambda a: a], [x])
    with pytest.raises(BuilderError, match="true_computation takes 3 parameters but must take 1"):
        b.conditional(p, x, lambda a, c, d: a, x, lambda a: a)


# ----------------------------------------------------------------------------
# Call
# ----------------------------------------------------------------------------


def test_call_callable_and_built_computation():
    sub = XlaBuilder("axpy")
    a, x, y = sub.parameter(0, "f32[]"), sub.parameter(1, "f32[3]"), sub.parameter(2, "f32[3]")
    sub.add(sub.mul(a, x), y)  # a scalar broadcasts implicitly
    axpy = sub.build()

    def square(sb, v):
        return sb.mul(v, v)

    b = XlaBuilder("main")
    pa, px = b.parameter(0, "f32[]"), b.parameter(1, "f32[3]")
    r1 = b.call(square, [px])
    r2 = b.call(square, [r1])  # the same computation is emitted once
    r3 = b.call(axpy, [pa, r2, px])
    module = b.build(r3)
    funcs = [op.sym_name.data for op in module.ops]
    assert funcs.count("square") == 1 and "main" in funcs
    xs = np.array([1, 2, 3], np.float32)
    (got,) = execute(module, np.float32(2), xs)
    np.testing.assert_array_equal(got, np.float32(2) * xs ** 4 + xs)


def test_call_multiple_results_and_no_operands():
    b = XlaBuilder("main")
    pair = b.call(lambda sb: (sb.constant(np.int32(1)), sb.constant(np.float32(2))), [])
    assert isinstance(pair, tuple) and len(pair) == 2
    got = execute(b.build(list(pair)))
    assert got == (1, 2.0)


def test_call_verifier_checks_callee():
    text = """
builtin.module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    %r = hlo.call @%s(%x) : (tensor<2xf32>) -> tensor<2xf32>
    func.return %r : tensor<2xf32>
  }
  func.func private @f(%a: tensor<%s>) -> tensor<2xf32> {
    func.return %a : tensor<2xf32>
  }
}
"""
    module = parse_module(text.replace("%s", "f", 1).replace("%s", "2xf32"))
    (got,) = execute(module, np.array([1, 2], np.float32))
    np.testing.assert_array_equal(got, [1, 2])
    with pytest.raises(HloVerifyError, match="callee @g is not defined"):
        parse_module(text.replace("%s", "g", 1).replace("%s", "2xf32"))


def test_call_verifier_rejects_argument_mismatch():
    text = """
builtin.module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xi32> {
    %r = hlo.call @f(%x) : (tensor<2xf32>) -> tensor<2xi32>
    func.return %r : tensor<2xi32>
  }
  func.func private @f(%a: tensor<2xf32>) -> tensor<2xf32> {
    func.return %a : tensor<2xf32>
  }
}
"""
    with pytest.raises(HloVerifyError, match=r"results \(s32\[2\]\) do not match @f's results \(f32\[2\]\)"):
        parse_module(text)


# ----------------------------------------------------------------------------
# Round trip
# ----------------------------------------------------------------------------


def test_round_trip_of_control_flow_module(rng):
    b = XlaBuilder("rt")
    p = b.parameter(0, "pred[]")
    i = b.parameter(1, "s32[]")
    x = b.parameter(2, "f32[3]")
    c = b.conditional(p, x, lambda a: a.builder.neg(a), x, lambda a: a + a)
    s = b.conditional(i, [lambda a: a, lambda a: a.builder.mul(a, a)], [c, c])
    loop = b.while_(lambda t: t.builder.lt(t.builder.get_tuple_element(t, 0), i),
                    lambda t: t.builder.tuple([t.builder.get_tuple_element(t, 0) + t.builder.constant(np.int32(1)),
                                               t.builder.get_tuple_element(t, 1) + s]),
                    b.tuple([b.constant(np.int32(0)), x]))
    called = b.call(lambda sb, t: sb.get_tuple_element(t, 1), [loop])
    module = b.build(called)
    text = str(module)
    again = parse_module(text)
    assert str(again) == text
    xs = rng.standard_normal(3).astype(np.float32)
    for args in ((True, 0), (False, 1), (True, 3)):
        want = execute(module, np.bool_(args[0]), np.int32(args[1]), xs)
        got = execute(again, np.bool_(args[0]), np.int32(args[1]), xs)
        np.testing.assert_array_equal(got[0], want[0])


WHILE_TEXT = """
builtin.module {
  func.func @main(%x: tensor<i32>) -> tensor<i32> {
    %r = hlo.while %x : (tensor<i32>) -> tensor<i32> {
    ^bb0(%a: tensor<i32>):
      %c = hlo.compare %a, %a {comparison_direction = "LT"} : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %c : tensor<i1>
    } {
    ^bb0(%b: tensor<i32>):
      hlo.return %b : tensor<i32>
    }
    func.return %r : tensor<i32>
  }
}
"""


def test_conditional_text_reads_both_region_spellings_and_prints_one():
    """hlo.conditional's branches side by side (``} {``, xDSL <= 0.74's declarative syntax) or comma-separated
    (``}, {``, MLIR's and xDSL 0.75's) read as the same op, printed side by side whatever the xDSL release."""
    text = """
builtin.module {
  func.func @main(%i: tensor<i32>, %x: tensor<2xf32>) -> tensor<2xf32> {
    %r = hlo.conditional %i, %x, %x, %x {note = "n"} : (tensor<i32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>)
        -> tensor<2xf32> {
    ^bb0(%a: tensor<2xf32>):
      hlo.return %a : tensor<2xf32>
    } {
    ^bb0(%b: tensor<2xf32>):
      %n = hlo.negate %b : (tensor<2xf32>) -> tensor<2xf32>
      hlo.return %n : tensor<2xf32>
    } {
    ^bb0(%c: tensor<2xf32>):
      hlo.return %c : tensor<2xf32>
    }
    func.return %r : tensor<2xf32>
  }
}
"""
    spaced = parse_module(text)
    commas = parse_module(text.replace("} {", "}, {"))
    assert str(spaced) == str(commas) == str(parse_module(str(spaced)))
    assert str(spaced).count("} {") == 2 and "}, {" not in str(spaced)
    (op,) = [op for op in spaced.walk() if op.name == "hlo.conditional"]
    assert len(op.regions) == 3 and op.attributes["note"].data == "n"
    for module in (spaced, commas):
        np.testing.assert_array_equal(execute(module, np.int32(1), np.ones(2, np.float32))[0], [-1, -1])
        np.testing.assert_array_equal(execute(module, np.int32(7), np.ones(2, np.float32))[0], [1, 1])


def test_verifier_on_while_and_conditional_text():
    module = parse_module(WHILE_TEXT)
    assert execute(module, np.int32(4)) == (4,)
    with pytest.raises(HloVerifyError, match=r"condition computation must return pred\[\], returns \(s32\[\]\)"):
        parse_module(WHILE_TEXT.replace("hlo.return %c : tensor<i1>", "hlo.return %a : tensor<i32>"))
    with pytest.raises(HloVerifyError, match=r"body computation takes \(f32\[\]\) but must take \(s32\[\]\)"):
        parse_module(WHILE_TEXT.replace("^bb0(%b: tensor<i32>):\n      hlo.return %b : tensor<i32>",
                                        "^bb0(%b: tensor<f32>):\n      hlo.return %x : tensor<i32>"))
    cond_text = """
builtin.module {
  func.func @main(%i: tensor<i32>, %x: tensor<2xf32>) -> tensor<2xf32> {
    %r = hlo.conditional %i, %x, %x : (tensor<i32>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32> {
    ^bb0(%a: tensor<2xf32>):
      hlo.return %a : tensor<2xf32>
    } {
    ^bb0(%b: tensor<2xf32>):
      %n = hlo.negate %b : (tensor<2xf32>) -> tensor<2xf32>
      hlo.return %n : tensor<2xf32>
    }
    func.return %r : tensor<2xf32>
  }
}
"""
    module = parse_module(cond_text)
    np.testing.assert_array_equal(execute(module, np.int32(5), np.ones(2, np.float32))[0], [-1, -1])
    with pytest.raises(HloVerifyError, match="has 3 branch operands but 2 branch computations"):
        parse_module(cond_text.replace("%i, %x, %x : (tensor<i32>, tensor<2xf32>, tensor<2xf32>)",
                                       "%i, %x, %x, %x : (tensor<i32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>)"))
    with pytest.raises(HloVerifyError, match=r"branch selector must be pred\[\] or s32\[\], got f32\[2\]"):
        parse_module(cond_text.replace("%r = hlo.conditional %i, %x, %x : (tensor<i32>",
                                       "%r = hlo.conditional %x, %x, %x : (tensor<2xf32>"))
