"""Effects family: tokens, infeed/outfeed, send/recv, optimization_barrier, dimension sizes, composite,
custom_call (user targets and the built-in LAPACK targets), checked against jax and XLA."""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax import lax

import lowering
from helpers import assert_close, random_array
from interop import import_jax
from lowering.runtime.program_state import TOKEN, CUSTOM_CALL_TARGETS, ResultSpec, unregister_custom_call
from xla_dialect import XlaBuilder, parse_module
from xla_dialect.errors import BuilderError, ExecutionError, HloVerifyError, UnsupportedError

# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------

DTYPES = [np.float32, np.int8, np.uint16, np.bool_, np.complex64, np.float64]


def round_trip(module):
    """Print and parse ``module``; the text must survive unchanged."""
    text = str(module)
    again = parse_module(text)
    assert str(again) == text
    return again


def parse_fails(body: str, match: str):
    """Parsed IR whose ``func.func @main`` body is ``body`` must fail verification with ``match``."""
    text = "builtin.module {\n  func.func @main(%x: tensor<2x3xf32>, %t: !hlo.token) {\n" + body + "\n" \
           "    func.return\n  }\n}"
    with pytest.raises(HloVerifyError, match=match):
        parse_module(text)


# ----------------------------------------------------------------------------
# Tokens
# ----------------------------------------------------------------------------


def test_tokens_build_run_and_round_trip():
    b = XlaBuilder("tokens")
    t0 = b.create_token()
    t1 = b.create_token()
    joined = b.after_all([t0, t1])
    empty = b.after_all([])
    assert joined.shape == "token[]" and empty.shape == "token[]"
    module = round_trip(b.build([joined, empty]))
    assert "hlo.after_all(%" in str(module) and "hlo.create_token" in str(module)
    out = lowering.compile(module)()
    assert out == (TOKEN, TOKEN)


def test_token_errors():
    b = XlaBuilder("bad")
    x = b.parameter(0, "f32[2]")
    with pytest.raises(BuilderError, match=r"XlaBuilder.after_all: hlo.after_all: operand #1 must be a token, got f32"):
        b.after_all([b.create_token(), x])
    with pytest.raises(BuilderError, match=r"XlaBuilder.infeed_with_token: token must be a token"):
        b.infeed_with_token(x, "f32[2]")
    with pytest.raises(BuilderError, match=r"outfeed_with_token: token must be a token"):
        b.outfeed_with_token(x, x)


# ----------------------------------------------------------------------------
# Infeed / outfeed
# ----------------------------------------------------------------------------


def test_infeed_reads_queue_in_order_and_persists_across_calls():
    b = XlaBuilder("feed")
    data, token = b.infeed_with_token(b.create_token(), "(f32[2], s32[])")
    second, _ = b.infeed_with_token(token, "u8[3]")
    assert data.shape == "(f32[2]{0}, s32[])" and second.shape == "u8[3]{0}"
    exe = lowering.compile(round_trip(b.build([data, second])))
    exe.infeed.put((np.array([1.5, -2], np.float32), np.int32(7)))
    exe.infeed.put(np.array([1, 2, 3], np.uint8))
    exe.infeed.put((np.array([3, 4], np.float32), 8))  # Python int: cast within its kind
    exe.infeed.put(np.array([9, 9, 9], np.uint8))
    f, s, u = exe()
    assert f.tolist() == [1.5, -2] and u.tolist() == [1, 2, 3]
    assert s == 7 and s.dtype == np.int32 and u.dtype == np.uint8
    f, s, u = exe()  # the queue persists: the second call reads the next items
    assert f.tolist() == [3, 4] and s == 8 and u.tolist() == [9, 9, 9] and len(exe.infeed) == 0


def test_infeed_empty_queue_and_mismatched_item_raise():
    b = XlaBuilder("feed")
    b.infeed("f32[2,2]")
    exe = lowering.compile(b.build())
    with pytest.raises(ExecutionError, match=r"hlo.infeed: the infeed queue is empty"):
        exe()
    exe.infeed.put(np.zeros((2, 3), np.float32))
    with pytest.raises(ExecutionError, match=r"hlo.infeed: the infeed item element #0 is float32\[2, 3\], "
                                             r"the op reads f32\[2,2\]"):
        exe()
    exe.infeed.put(np.zeros((2, 2), np.int32))
    with pytest.raises(ExecutionError, match="int32"):
        exe()
    exe.infeed.put((np.zeros((2, 2), np.float32), np.zeros(1)))
    with pytest.raises(ExecutionError, match=r"holds 2 array\(s\), the op reads 1"):
        exe()


def test_infeed_empty_tuple_reads_nothing_and_nested_tuple_rejected():
    b = XlaBuilder("feed")
    nothing = b.infeed("()")
    exe = lowering.compile(b.build(nothing))
    exe.infeed.put(np.ones(1))
    assert exe() == ()  # an empty tuple result flattens to nothing
    assert len(exe.infeed) == 1  # the item is still there
    with pytest.raises(BuilderError, match=r"XlaBuilder.infeed: infeed shape \(\(f32\[\]\)\) has a nested tuple"):
        XlaBuilder("n").infeed("((f32[]))")


def test_infeed_in_while_loop_seed_example():
    # The seed: two loops, each reading an infeed per iteration, have a total order.
    b = XlaBuilder("loops")

    def cond(state):
        sb = state.builder
        return sb.lt(sb.get_tuple_element(state, 0), sb.constant(np.int32(3)))

    def body(state):
        sb = state.builder
        i = sb.get_tuple_element(state, 0)
        acc = sb.get_tuple_element(state, 1)
        return sb.tuple([sb.add(i, sb.constant(np.int32(1))), sb.add(acc, sb.infeed("f32[2]"))])

    init = b.tuple([b.constant(np.int32(0)), b.constant(np.zeros(2, np.float32))])
    result1 = b.while_(cond, body, init)
    result2 = b.while_(cond, body, b.tuple([b.constant(np.int32(0)), b.get_tuple_element(result1, 1)]))
    exe = lowering.compile(b.build([b.get_tuple_element(result1, 1), b.get_tuple_element(result2, 1)]))
    for k in range(6):
        exe.infeed.put(np.array([k, 10 * k], np.float32))
    first, both = exe()
    assert first.tolist() == [3, 30] and both.tolist() == [15, 150]


def test_outfeed_writes_items_in_order():
    b = XlaBuilder("out")
    x = b.parameter(0, "f32[2,3]")
    n = b.parameter(1, "s64[]")
    token = b.outfeed(x, "f32[2,3]{0,1}", "cfg")
    token = b.outfeed_with_token(b.tuple([n, x]), token)
    b.outfeed_with_token(b.neg(x), token)
    module = round_trip(b.build(b.add(x, x)))
    assert 'outfeed_config = "cfg"' in str(module)
    exe = lowering.compile(module)
    x0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    (doubled,) = exe(x0, np.int64(-4))
    assert_close(doubled, 2 * x0)
    np.testing.assert_array_equal(exe.outfeed.get(), x0)
    count, again = exe.outfeed.get()
    assert count == -4 and count.dtype == np.int64 and again.tolist() == x0.tolist()
    np.testing.assert_array_equal(exe.outfeed.get(), -x0)
    with pytest.raises(ExecutionError, match="the outfeed queue is empty"):
        exe.outfeed.get()
    b = XlaBuilder("b")
    with pytest.raises(BuilderError, match=r"XlaBuilder.outfeed: shape_with_layout f32\[3,2\]\{1,0\} does not match"):
        b.outfeed(b.parameter(0, "f32[2,3]"), "f32[3,2]{1,0}")


def test_feed_verifier_errors():
    parse_fails('    %r:2 = "hlo.infeed"(%t) : (!hlo.token) -> (tensor<2xf32>, tensor<2xf32>)',
                r"hlo.infeed: the last result must be a token")
    parse_fails('    %r = "hlo.outfeed"(%x, %x) : (tensor<2x3xf32>, tensor<2x3xf32>) -> !hlo.token',
                r"hlo.outfeed: the last operand must be a token, got f32\[2,3\]")


# ----------------------------------------------------------------------------
# Send / recv
# ----------------------------------------------------------------------------


def test_send_then_recv_on_a_channel():
    b = XlaBuilder("chan")
    x = b.parameter(0, "f32[3]")
    token = b.send_with_token(x, b.create_token(), 1)
    token = b.send_with_token(b.tuple([b.neg(x), b.constant(np.int32(5))]), token, 2)
    got, token = b.recv_with_token(token, "f32[3]", 1)
    pair, _ = b.recv_with_token(token, "(f32[3], s32[])", 2)
    module = round_trip(b.build([got, pair]))
    assert "channel_id = 1 : i64" in str(module)
    x0 = np.array([1, -2, 3], np.float32)
    a, n, c = lowering.compile(module)(x0)
    assert a.tolist() == x0.tolist() and n.tolist() == (-x0).tolist() and c == 5


def test_recv_without_send_raises():
    b = XlaBuilder("chan")
    b.recv("s32[2]", 7)
    exe = lowering.compile(b.build())
    with pytest.raises(ExecutionError, match=r"hlo.recv \(channel 7\): nothing was sent on channel 7"):
        exe()
    exe.channels.put(7, np.array([4, 5], np.int32))  # the host may provide it
    assert exe()[0].tolist() == [4, 5]


def test_host_transfers():
    b = XlaBuilder("host")
    x = b.parameter(0, "f64[2]")
    token = b.send_to_host(x, b.create_token(), "f64[2]", 3)
    data, _ = b.recv_from_host(token, "f64[2]", 4)
    module = round_trip(b.build(b.add(x, data)))
    assert 'channel_type = "DEVICE_TO_HOST"' in str(module) and 'channel_type = "HOST_TO_DEVICE"' in str(module)
    exe = lowering.compile(module)
    exe.channels.put(4, np.array([10.0, 20.0]))
    (out,) = exe(np.array([1.0, 2.0]))
    assert out.tolist() == [11, 22] and exe.channels.get(3).tolist() == [1, 2]


def test_send_recv_between_devices():
    # Replica 0 sends to replica 1 along source_target_pairs; replica 1 receives, replica 0 gets zeros.
    b = XlaBuilder("p2p")
    x = b.parameter(0, "s32[2]")
    token = b.send_with_token(x, b.create_token(), 9, source_target_pairs=[(0, 1)])
    got, _ = b.recv_with_token(token, "s32[2]", 9, source_target_pairs=[(0, 1)])
    exe = lowering.compile(b.build(got), num_replicas=2)
    r0, r1 = exe([np.array([1, 2], np.int32)], [np.array([3, 4], np.int32)])
    assert r0[0].tolist() == [0, 0] and r1[0].tolist() == [1, 2]


def test_channel_verifier_errors():
    def recv(props: str) -> str:
        return f'    %r:2 = "hlo.recv"(%t) <{{{props}}}> : (!hlo.token) -> (tensor<2xf32>, !hlo.token)'

    parse_fails(recv("channel_id = -1 : i64"), "channel_id must be non-negative")
    parse_fails(recv('channel_id = 1 : i64, channel_type = "DEVICE_TO_HOST"'),
                "channel_type must be DEVICE_TO_DEVICE or HOST_TO_DEVICE")
    parse_fails(recv('channel_id = 1 : i64, channel_type = "HOST_TO_DEVICE", is_host_transfer = false'),
                "is_host_transfer = false contradicts channel_type HOST_TO_DEVICE")
    parse_fails(recv("channel_id = 1 : i64, source_target_pairs = array<i64: 0, 1, 0, 2>"),
                r"repeated source in \[\[0, 1\], \[0, 2\]\]")
    parse_fails(recv("channel_id = 1 : i64, source_target_pairs = array<i64: 0, 1, 2>"), "pairs")
    with pytest.raises(BuilderError, match="channel_handle must be an int"):
        XlaBuilder("b").recv("f32[]", "one")


# ----------------------------------------------------------------------------
# Optimization barrier and dimension sizes
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_optimization_barrier_vs_jax(rng, dtype):
    x0 = random_array(rng, (3, 4), dtype, special=True)
    y0 = random_array(rng, (0, 2), dtype)
    b = XlaBuilder("barrier")
    x, y = b.parameter(0, f"{_xla(dtype)}[3,4]"), b.parameter(1, f"{_xla(dtype)}[0,2]")
    single = b.optimization_barrier(x)
    pair = b.optimization_barrier([x, y])
    assert isinstance(pair, tuple) and len(pair) == 2
    module = round_trip(b.build([single, *pair]))
    got = lowering.compile(module)(x0, y0)
    want = jax.jit(lambda a, c: (lax.optimization_barrier(a), *lax.optimization_barrier((a, c))))(x0, y0)
    for g, w in zip(got, want):
        assert_close(g, np.asarray(w))


def test_get_dimension_size_vs_xla():
    from interop.stablehlo import run_xla

    b = XlaBuilder("dims")
    x = b.parameter(0, "f16[2,0,5]")
    sizes = [b.get_dimension_size(x, d) for d in range(3)]
    module = round_trip(b.build(sizes))
    got = lowering.compile(module)(np.zeros((2, 0, 5), np.float16))
    want = run_xla(module, np.zeros((2, 0, 5), np.float16))
    assert [int(g) for g in got] == [2, 0, 5] == [int(w) for w in want]
    assert all(g.dtype == np.int32 and g.shape == () for g in got)
    b = XlaBuilder("b")
    with pytest.raises(BuilderError, match=r"hlo.get_dimension_size: dimension 3 is out of range \[0, 3\)"):
        b.get_dimension_size(b.parameter(0, "f32[1,2,3]"), 3)


def test_set_dimension_size_static_bound():
    b = XlaBuilder("dyn")
    x = b.parameter(0, "f32[2,3]")
    n = b.parameter(1, "s32[]")
    y = b.set_dimension_size(x, n, 1)
    assert y.shape == "f32[2,3]{1,0}"  # static shapes: the bound
    exe = lowering.compile(round_trip(b.build([y, b.get_dimension_size(y, 1)])))
    x0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    data, size = exe(x0, np.int32(2))
    assert data.tolist() == x0.tolist() and size == 3
    with pytest.raises(ExecutionError, match=r"hlo.set_dimension_size: size 4 is outside \[0, 3\]"):
        exe(x0, np.int32(4))
    with pytest.raises(BuilderError, match=r"size must be an s32\[\] scalar, got s64\[\]"):
        b2 = XlaBuilder("b")
        b2.set_dimension_size(b2.parameter(0, "f32[2]"), b2.constant(1, "s64"), 0)


# ----------------------------------------------------------------------------
# Composite
# ----------------------------------------------------------------------------


def test_composite_vs_jax_composite(rng):
    x0 = rng.standard_normal((4, 5)).astype(np.float32)

    def decomposition(x):
        sb = x.builder
        return sb.mul(x, sb.logistic(x))

    b = XlaBuilder("comp")
    x = b.parameter(0, "f32[4,5]")
    y = b.composite_call(decomposition, [x], "my_ns.silu", {"beta": 1.0, "n": np.uint8(3), "tag": "x"}, version=2)
    module = round_trip(b.build(y))
    text = str(module)
    assert 'name = "my_ns.silu"' in text and "decomposition = @decomposition" in text and "n = 3 : ui8" in text
    (got,) = lowering.compile(module)(x0)
    silu = lax.composite(lambda v: v * jax.nn.sigmoid(v), "my_ns.silu", version=2)
    assert "stablehlo.composite" in jax.jit(silu).lower(x0).as_text()
    assert_close(got, np.asarray(jax.jit(silu)(x0)), max_ulp=2)


def test_composite_errors():
    b = XlaBuilder("comp")
    x = b.parameter(0, "f32[2]")
    with pytest.raises(BuilderError, match=r"name 'silu' must be a namespaced op name"):
        b.composite_call(lambda v: v, [x], "silu")
    body = ('    %r = hlo.composite %x {name = "a.b", decomposition = @f} : (tensor<2x3xf32>) -> tensor<3x2xf32>\n'
            '    func.return\n  }\n  func.func private @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {\n'
            '    func.return %a : tensor<2x3xf32>')
    parse_fails(body, r"results \(f32\[3,2\]\) do not match decomposition @f's results \(f32\[2,3\]\)")


# ----------------------------------------------------------------------------
# Custom calls: registry and verifier
# ----------------------------------------------------------------------------


@pytest.fixture
def my_target():
    calls = []

    def target(operands, attributes, result_types):
        calls.append((operands, attributes, result_types))
        x, y = operands
        assert not x.flags.writeable  # operands are read-only views
        return np.outer(x, y[0]).astype(np.float32), np.int32(x.size)

    lowering.register_custom_call("my_outer", target)
    yield calls
    unregister_custom_call("my_outer")


def test_custom_call_user_target(my_target):
    b = XlaBuilder("cc")
    x = b.parameter(0, "f32[2]")
    y = b.parameter(1, "f32[2,3]")
    out, n = b.custom_call("my_outer", [x, y], "(f32[2,3], s32[])", opaque="cfg text", has_side_effect=True)
    module = round_trip(b.build([out, n]))
    assert 'hlo.custom_call "my_outer"(%' in str(module)
    x0, y0 = np.array([1, 2], np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    got, count = lowering.compile(module)(x0, y0)
    assert got.tolist() == np.outer(x0, y0[0]).tolist() and count == 2
    operands, attrs, specs = my_target[0]
    assert attrs["call_target_name"] == "my_outer" and attrs["backend_config"] == "cfg text"
    assert attrs["has_side_effect"] is True and attrs["api_version"] == 1
    assert specs[0] == ResultSpec((2, 3), np.dtype(np.float32), specs[0].type) and specs[1].shape == ()


def test_custom_call_called_computations():
    sub = XlaBuilder("twice")
    p = sub.parameter(0, "f32[3]")
    sub.add(p, p)
    twice = sub.build()
    lowering.register_custom_call("apply_twice", lambda ops, attrs, specs: attrs["called_functions"][0](
        attrs["called_functions"][0](ops[0])))
    try:
        b = XlaBuilder("cc")
        b.custom_call("apply_twice", [b.parameter(0, "f32[3]")], "f32[3]", called_computations=[twice])
        module = round_trip(b.build())
        assert "called_computations = [@" in str(module)
        assert lowering.compile(module)(np.array([1, 2, 3], np.float32))[0].tolist() == [4, 8, 12]
    finally:
        unregister_custom_call("apply_twice")


def test_custom_call_unknown_target_and_bad_results(my_target):
    b = XlaBuilder("cc")
    x = b.parameter(0, "f32[2]")
    b.custom_call("no_such_target", [x], "f32[2]")
    with pytest.raises(UnsupportedError, match=r"custom-call target 'no_such_target' is registered"):
        lowering.compile(b.build())
    b = XlaBuilder("cc")
    x, y = b.parameter(0, "f32[2]"), b.parameter(1, "f32[2,3]")
    b.custom_call("my_outer", [x, y], "(f32[3,2], s32[])")
    with pytest.raises(ExecutionError, match=r"@my_outer: result #0 has shape \[2, 3\], the call declares f32\[3,2\]"):
        lowering.compile(b.build())(np.ones(2, np.float32), np.ones((2, 3), np.float32))
    lowering.register_custom_call("failing", lambda *a: 1 / 0)
    try:
        b = XlaBuilder("cc")
        b.custom_call("failing", [], "f32[]")
        with pytest.raises(ExecutionError, match=r"@failing: the target raised ZeroDivisionError"):
            lowering.compile(b.build())()
    finally:
        unregister_custom_call("failing")


def test_custom_call_layouts_aliases_and_ffi_config():
    b = XlaBuilder("cc")
    x = b.parameter(0, "f32[2,3]")
    out = b.custom_call("lapack_sgetrf_ffi", [x], "(f32[2,3]{0,1}, s32[2]{0}, s32[])",
                        operand_shapes_with_layout=["f32[2,3]{0,1}"], backend_config={},
                        output_operand_aliasing=[((0,), (0, ()))])
    text = str(round_trip(b.build(list(out))))
    assert "operand_layouts = [array<i64: 0, 1>]" in text and "result_layouts = [array<i64: 0, 1>, array<i64: 0>" in text
    assert "api_version = 4 : i32" in text and "output_operand_aliases = [{output_tuple_indices = array<i64: 0>" in text
    with pytest.raises(BuilderError, match=r"operand_shapes_with_layout\[0\] f32\[3,2\]\{0,1\} does not match"):
        b2 = XlaBuilder("b")
        b2.custom_call("t", [b2.parameter(0, "f32[2,3]")], "f32[]", operand_shapes_with_layout=["f32[3,2]{0,1}"])
    with pytest.raises(BuilderError, match=r"output_operand_aliases\[0\]: output \[0\] has type s32\[\] but operand 0"):
        b2 = XlaBuilder("b")
        b2.custom_call("t", [b2.parameter(0, "f32[2,3]")], "(s32[], f32[])", output_operand_aliasing=[((0,), (0, ()))])

    def cc(props: str, results="tensor<2x3xf32>") -> str:
        return f'    %r = "hlo.custom_call"(%x) <{{call_target_name = "t"{props}}}> : (tensor<2x3xf32>) -> {results}'

    parse_fails(cc(", operand_layouts = [array<i64: 0, 1>]"), "must be given together")
    parse_fails(cc(", operand_layouts = [array<i64: 0, 0>], result_layouts = [array<i64: 1, 0>]"),
                r"operand_layouts\[0\] = \[0, 0\] is not a permutation of 0..1")
    parse_fails(cc(", operand_layouts = [], result_layouts = [array<i64: 1, 0>]"), "operand_layouts has 0 layouts")
    parse_fails(cc(", backend_config = {a = 1 : i64}, api_version = 1 : i32"), "needs api_version = 4")
    parse_fails(cc(", api_version = 7 : i32"), "api_version must be one of")
    parse_fails(cc("").replace('"t"', '""'), "call_target_name must not be empty")


def test_jax_import_with_custom_call_runs():
    # A whole JAX program (LU-based solve) imported from StableHLO runs with the built-in targets.
    a = np.random.default_rng(1).standard_normal((2, 4, 4))
    got, want = _imported(lambda m: jnp.linalg.solve(m, m[..., :1]), a)
    assert_close(got[0], want[0])


# ----------------------------------------------------------------------------
# The built-in LAPACK targets, raw, against jaxlib's own kernels
# ----------------------------------------------------------------------------

PREFIX = {np.float32: "s", np.float64: "d", np.complex64: "c", np.complex128: "z"}
REAL = {np.float32: np.float32, np.float64: np.float64, np.complex64: np.float32, np.complex128: np.float64}
CPLX = {np.float32: np.complex64, np.float64: np.complex128, np.complex64: np.complex64,
        np.complex128: np.complex128}
U8 = np.uint8


def _xla(dtype) -> str:
    from xla_dialect.types import element_type_from_dtype

    return element_type_from_dtype(dtype).xla_name


def _shape_text(dtype, shape) -> str:
    return f"{_xla(dtype)}[{','.join(map(str, shape))}]"


def _major_to_minor(shape, matrix: bool):
    """jax.ffi layouts: matrices column-major (batch dimensions outermost), others default."""
    r = len(shape)
    return tuple(range(r - 2)) + (r - 1, r - 2) if matrix and r >= 2 else None


def _random(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


@pytest.fixture(scope="module")
def jax_lapack():
    """Make sure jaxlib's LAPACK kernels are initialized (lowering a linalg op does it)."""
    jax.jit(jnp.linalg.cholesky).lower(np.eye(2, dtype=np.float32))
    return True


def _compare_raw(routine, dtype, operands, outs, attrs, matrix_ins, matrix_outs, skip=()):
    """Run ``lapack_<p><routine>_ffi`` through our builder/executor and through jax.ffi.ffi_call; compare bits."""
    target = f"lapack_{PREFIX[dtype]}{routine}_ffi"
    b = XlaBuilder(routine)
    params = [b.parameter(i, _shape_text(x.dtype.type, x.shape)) for i, x in enumerate(operands)]
    shape = "(" + ", ".join(_shape_text(d, s) for s, d in outs) + ")"
    results = b.custom_call(target, params, shape, backend_config=attrs)
    results = list(results) if isinstance(results, tuple) else [results]
    got = lowering.compile(b.build(results))(*operands)
    call = jax.ffi.ffi_call(target, [jax.ShapeDtypeStruct(s, d) for s, d in outs],
                            input_layouts=[_major_to_minor(x.shape, m) for x, m in zip(operands, matrix_ins)],
                            output_layouts=[_major_to_minor(s, m) for (s, _), m in zip(outs, matrix_outs)])
    want = jax.jit(lambda *xs: call(*xs, **attrs))(*operands)
    want = want if isinstance(want, (list, tuple)) else [want]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        if i not in skip:
            assert_close(g, np.asarray(w), err_msg=f"{target} output #{i}")
    return got


LAPACK_DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


@pytest.mark.parametrize("dtype", LAPACK_DTYPES)
def test_lapack_factorizations_raw(rng, dtype, jax_lapack):
    a = _random(rng, (2, 5, 5), dtype)
    spd = a @ np.conj(np.swapaxes(a, -1, -2)) + 5 * np.eye(5, dtype=dtype)
    spd[1, 0, 0] = -1  # not positive definite: info > 0
    tall = _random(rng, (3, 6, 4), dtype)
    for uplo in "LU":
        _, info = _compare_raw("potrf", dtype, [spd], [((2, 5, 5), dtype), ((2,), np.int32)],
                               {"uplo": U8(ord(uplo))}, [True], [True, False])
        assert info[0] == 0 and info[1] > 0
    lu, ipiv, info = _compare_raw("getrf", dtype, [tall], [((3, 6, 4), dtype), ((3, 4), np.int32), ((3,), np.int32)],
                                  {}, [True], [True, False, False])
    assert ipiv.min() >= 1  # 1-based, as LAPACK returns them
    wide = np.swapaxes(tall, -1, -2).copy()
    _compare_raw("getrf", dtype, [wide], [((3, 4, 6), dtype), ((3, 4), np.int32), ((3,), np.int32)],
                 {}, [True], [True, False, False])
    qr, tau = _compare_raw("geqrf", dtype, [tall], [((3, 6, 4), dtype), ((3, 4), dtype)], {}, [True], [True, False])
    orgqr = "ungqr" if np.dtype(dtype).kind == "c" else "orgqr"
    _compare_raw(orgqr, dtype, [qr, tau], [((3, 6, 4), dtype)], {}, [True, False], [True])
    _compare_raw("geqp3", dtype, [tall, np.zeros((3, 4), np.int32)],
                 [((3, 6, 4), dtype), ((3, 4), np.int32), ((3, 4), dtype)], {}, [True, False], [True, False, False])
    x = _random(rng, (2, 5, 3), dtype)
    right = np.swapaxes(x, -1, -2).copy()
    for side, xs, uplo, trans, diag in (("L", x, "L", "N", "N"), ("R", right, "U", "T", "U"), ("L", x, "U", "C", "N")):
        _compare_raw("trsm", dtype, [a, xs], [(xs.shape, dtype)],
                     {"side": U8(ord(side)), "uplo": U8(ord(uplo)), "trans_x": U8(ord(trans)), "diag": U8(ord(diag))},
                     [True, True], [True])


@pytest.mark.parametrize("dtype", LAPACK_DTYPES)
def test_lapack_eigen_and_svd_raw(rng, dtype, jax_lapack):
    a = _random(rng, (2, 5, 5), dtype)
    herm = a + np.conj(np.swapaxes(a, -1, -2))
    real = REAL[dtype]
    syevd = "heevd" if np.dtype(dtype).kind == "c" else "syevd"
    for mode, uplo in (("V", "L"), ("N", "U")):
        _compare_raw(syevd, dtype, [herm], [((2, 5, 5), dtype), ((2, 5), real), ((2,), np.int32)],
                     {"mode": U8(ord(mode)), "uplo": U8(ord(uplo))}, [True], [True, False, False])
    m = _random(rng, (2, 6, 4), dtype)
    for routine, mode, u_shape, vt_shape in (("gesdd", "A", (6, 6), (4, 4)), ("gesdd", "S", (6, 4), (4, 4)),
                                             ("gesdd", "N", (6, 6), (4, 4)), ("gesvd", "S", (6, 4), (4, 4))):
        skip = (2, 3) if mode == "N" else ()  # jaxlib leaves u and vt unwritten
        _compare_raw(routine, dtype, [m], [((2, 6, 4), dtype), ((2, 4), real), ((2,) + u_shape, dtype),
                                           ((2,) + vt_shape, dtype), ((2,), np.int32)],
                     {"mode": U8(ord(mode))}, [True], [True, False, True, True, False], skip)
    cplx = CPLX[dtype]
    geev_outs = ([((2, 5), dtype), ((2, 5), dtype), ((2, 5, 5), cplx), ((2, 5, 5), cplx), ((2,), np.int32)]
                 if np.dtype(dtype).kind == "f" else
                 [((2, 5), dtype), ((2, 5, 5), dtype), ((2, 5, 5), dtype), ((2,), np.int32)])
    vecs = (2, 3) if np.dtype(dtype).kind == "f" else (1, 2)
    _compare_raw("geev", dtype, [a], geev_outs, {"compute_left": U8(ord("V")), "compute_right": U8(ord("V"))},
                 [True], [len(s) == 3 for s, _ in geev_outs])
    _compare_raw("geev", dtype, [a], geev_outs, {"compute_left": U8(ord("N")), "compute_right": U8(ord("V"))},
                 [True], [len(s) == 3 for s, _ in geev_outs], skip=vecs[:1])
    bad = a.copy()
    bad[0, 1, 1] = np.nan
    got = _compare_raw("geev", dtype, [bad], geev_outs, {"compute_left": U8(ord("N")), "compute_right": U8(ord("N"))},
                       [True], [len(s) == 3 for s, _ in geev_outs], skip=tuple(range(len(geev_outs) - 1)))
    assert got[-1].tolist() == [-4, 0]  # non-finite input: jaxlib reports info = -4


@pytest.mark.parametrize("dtype", LAPACK_DTYPES)
def test_lapack_reductions_raw(rng, dtype, jax_lapack):
    a = _random(rng, (2, 5, 5), dtype)
    real = REAL[dtype]
    schur_outs = ([((2, 5, 5), dtype), ((2, 5, 5), dtype), ((2, 5), dtype), ((2, 5), dtype), ((2,), np.int32),
                   ((2,), np.int32)] if np.dtype(dtype).kind == "f" else
                  [((2, 5, 5), dtype), ((2, 5, 5), dtype), ((2, 5), dtype), ((2,), np.int32), ((2,), np.int32)])
    _compare_raw("gees", dtype, [a], schur_outs, {"mode": U8(ord("V")), "sort": U8(ord("N"))}, [True],
                 [len(s) == 3 for s, _ in schur_outs])
    _compare_raw("gehrd", dtype, [a], [((2, 5, 5), dtype), ((2, 4), dtype), ((2,), np.int32)],
                 {"low": np.int32(1), "high": np.int32(5)}, [True], [True, False, False])
    herm = a + np.conj(np.swapaxes(a, -1, -2))
    sytrd = "hetrd" if np.dtype(dtype).kind == "c" else "sytrd"
    for uplo in "LU":
        _compare_raw(sytrd, dtype, [herm], [((2, 5, 5), dtype), ((2, 5), real), ((2, 4), real), ((2, 4), dtype),
                                            ((2,), np.int32)], {"uplo": U8(ord(uplo))}, [True],
                     [True, False, False, False, False])
    dl, d, du = (_random(rng, (2, 6), dtype) for _ in range(3))
    rhs = _random(rng, (2, 6, 3), dtype)
    _compare_raw("gtsv", dtype, [dl, d, du, rhs], [((2, 6), dtype)] * 3 + [((2, 6, 3), dtype), ((2,), np.int32)],
                 {}, [False, False, False, True], [False, False, False, True, False])


def test_lapack_empty_and_unsupported(jax_lapack):
    b = XlaBuilder("empty")
    x = b.parameter(0, "f32[0,3,3]")
    y = b.parameter(1, "f64[2,0,0]")
    r1 = b.custom_call("lapack_spotrf_ffi", [x], "(f32[0,3,3], s32[0])", backend_config={"uplo": U8(76)})
    r2 = b.custom_call("lapack_dgetrf_ffi", [y], "(f64[2,0,0], s32[2,0], s32[2])", backend_config={})
    got = lowering.compile(b.build([*r1, *r2]))(np.zeros((0, 3, 3), np.float32), np.zeros((2, 0, 0)))
    assert [g.shape for g in got] == [(0, 3, 3), (0,), (2, 0, 0), (2, 0), (2,)] and got[-1].tolist() == [0, 0]
    b = XlaBuilder("sort")
    x = b.parameter(0, "f32[3,3]")
    b.custom_call("lapack_sgees_ffi", [x], "(f32[3,3], f32[3,3], f32[3], f32[3], s32[], s32[])",
                  backend_config={"mode": U8(86), "sort": U8(83)})
    with pytest.raises(UnsupportedError, match=r"lapack_sgees_ffi.*sort = 'S'"):
        lowering.compile(b.build())(np.eye(3, dtype=np.float32))
    b = XlaBuilder("dtype")
    b.custom_call("lapack_spotrf_ffi", [b.parameter(0, "f64[2,2]")], "(f64[2,2], s32[])", backend_config={})
    with pytest.raises(ExecutionError, match=r"'lapack_spotrf_ffi' takes float32 matrices, got float64"):
        lowering.compile(b.build())(np.eye(2))


# ----------------------------------------------------------------------------
# Whole JAX linear-algebra programs, imported and run
# ----------------------------------------------------------------------------


def _imported(fn, *args):
    """Import ``jax.jit(fn)`` lowered on ``args`` and run it here; also return jax's outputs."""
    got = lowering.compile(import_jax(fn, *args))(*args)
    return got, [np.asarray(w) for w in jax.tree.leaves(jax.jit(fn)(*args))]


def _spd(a):
    return a @ np.conj(np.swapaxes(a, -1, -2)) + 4 * np.eye(a.shape[-1], dtype=a.dtype)


LINALG_PROGRAMS = {
    np.float32: [(jnp.linalg.cholesky, _spd), (jnp.linalg.qr, lambda a: a[0, :, :3]), (jnp.linalg.eigh, _spd),
                 (jnp.linalg.svd, lambda a: a[0, :3]), (lax.linalg.lu, None), (jnp.linalg.eig, lambda a: a[0])],
    np.complex128: [(jnp.linalg.inv, None), (jsl.schur, lambda a: a[0]),
                    (lambda m: jsl.hessenberg(m, calc_q=True), lambda a: a[0]), (lax.linalg.tridiagonal, _spd),
                    (lambda m: jsl.qr(m, pivoting=True), lambda a: a[0, :, :3]),
                    (lambda m: lax.linalg.triangular_solve(m, m, left_side=True, lower=True), None)],
}


@pytest.mark.parametrize("dtype", list(LINALG_PROGRAMS))
def test_jax_linalg_programs_bit_exact(rng, dtype):
    a = _random(rng, (2, 4, 4), dtype)
    for fn, make in LINALG_PROGRAMS[dtype]:
        got, want = _imported(fn, make(a) if make else a)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_close(g, w, err_msg=getattr(fn, "__name__", "lambda"))


def test_lapack_targets_registered():
    for p in "sdcz":
        for routine in ("potrf", "getrf", "geqrf", "geqp3", "gesdd", "gesvd", "trsm", "geev", "gees", "gehrd",
                        "gtsv"):
            assert f"lapack_{p}{routine}_ffi" in CUSTOM_CALL_TARGETS
    for name in ("lapack_sorgqr_ffi", "lapack_zungqr_ffi", "lapack_dsyevd_ffi", "lapack_cheevd_ffi",
                 "lapack_ssytrd_ffi", "lapack_zhetrd_ffi"):
        assert name in CUSTOM_CALL_TARGETS
