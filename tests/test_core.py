"""Builder core, executor core, dialect registration and the CLI."""

import subprocess
import sys

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import lowering
from xla_dialect import XlaBuilder, XlaError, format_shape, parse_module
from xla_dialect.errors import BuilderError, ExecutionError, HloVerifyError, MlirParseError


def build_axpy():
    # The XLA compiler overview's axpy example, translated to Python.
    builder = XlaBuilder("axpy")
    param_alpha = builder.parameter(0, "f32[]", "alpha")
    param_x = builder.parameter(1, "f32[10]", "x")
    param_y = builder.parameter(2, "f32[10]", "y")
    builder.add(builder.mul(param_alpha, param_x), param_y)
    return builder.build()


def test_axpy_seed_example_runs():
    module = build_axpy()
    assert isinstance(module, ModuleOp)
    alpha = np.float32(2.5)
    x = np.arange(10, dtype=np.float32)
    y = np.full(10, -1.0, np.float32)
    (result,) = lowering.compile(module)(alpha, x, y)
    np.testing.assert_array_equal(result, alpha * x + y)
    assert result.dtype == np.float32


def test_builder_attaches_default_layouts_like_xla_client():
    module = build_axpy()
    main = module.ops.first
    assert [format_shape(t) for t in main.function_type.inputs] == ["f32[]", "f32[10]{0}", "f32[10]{0}"]


def test_builder_without_default_layouts():
    b = XlaBuilder("f", default_layouts=False)
    x = b.parameter(0, "f32[2,3]")
    b.neg(x)
    assert "#hlo.layout" not in str(b.build())


def test_parameters_out_of_order_and_gaps():
    b = XlaBuilder("f")
    y = b.parameter(1, "s32[3]")
    x = b.parameter(0, "s32[3]")
    b.sub(x, y)
    (r,) = lowering.compile(b.build())(np.array([5, 5, 5], np.int32), np.array([1, 2, 3], np.int32))
    np.testing.assert_array_equal(r, [4, 3, 2])
    b = XlaBuilder("g")
    b.parameter(1, "s32[3]")
    with pytest.raises(BuilderError, match="parameter numbers must be 0..n-1"):
        b.build()


def test_builder_errors_name_the_call():
    b = XlaBuilder("bad")
    x = b.parameter(0, "f32[2,3]")
    y = b.parameter(1, "f32[3]")
    with pytest.raises(BuilderError, match=r"XlaBuilder\.add: hlo\.add: operands of rank 2 and 1"):
        b.add(x, y)
    with pytest.raises(BuilderError, match="XlaBuilder.mul"):
        b.mul(x, 3.0)
    with pytest.raises(BuilderError, match="already defined"):
        b.parameter(0, "f32[]")
    with pytest.raises(BuilderError, match="unknown element type"):
        b.parameter(2, "q32[]")
    assert issubclass(BuilderError, XlaError)


def test_constants_keep_exact_values_and_types():
    b = XlaBuilder("c")
    b.constant(np.array([1.1, -0.0, 3e38], np.float32))
    module = b.build()
    text = str(module)
    again = parse_module(text)
    assert again.is_structurally_equivalent(module)
    (r,) = lowering.compile(again)()
    np.testing.assert_array_equal(r.view(np.int32), np.array([1.1, -0.0, 3e38], np.float32).view(np.int32))


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f8e4m3fn", "s4", "u2", "pred", "c64", "c128", "u64", "s64"])
def test_constant_round_trip_every_type(dtype):
    from xla_dialect.types import element_type_named

    np_dtype = element_type_named(dtype).dtype
    values = np.array([0, 1, 1, 0, 1], dtype=np.int8).astype(np_dtype)
    b = XlaBuilder("c")
    b.constant(values)
    module = b.build()
    again = parse_module(str(module))
    assert again.is_structurally_equivalent(module)
    (r,) = lowering.compile(again)()
    assert r.dtype == np_dtype
    np.testing.assert_array_equal(r.astype(np.float64) if dtype not in ("c64", "c128") else r, 
                                  values.astype(np.float64) if dtype not in ("c64", "c128") else values)


def test_large_and_nonfinite_constants_use_hex():
    values = np.array([np.nan, np.inf, -np.inf] + list(range(100)), np.float32)
    b = XlaBuilder("c")
    b.constant(values)
    module = b.build()
    assert '"0x' in str(module)
    (r,) = lowering.compile(parse_module(str(module)))()
    np.testing.assert_array_equal(r.view(np.int32), values.view(np.int32))


def test_executor_checks_arguments():
    exe = lowering.compile(build_axpy())
    with pytest.raises(ExecutionError, match="takes 3 arguments"):
        exe(np.float32(1))
    with pytest.raises(ExecutionError, match=r"argument #1: expected f32\[10\]"):
        exe(np.float32(1), np.zeros(3, np.float32), np.zeros(10, np.float32))
    with pytest.raises(ExecutionError, match="dtype"):
        exe(np.float32(1), np.zeros(10, np.complex64), np.zeros(10, np.float32))
    with pytest.raises(ExecutionError, match="no function @nope"):
        lowering.compile(build_axpy(), entry="nope")


def test_executor_source_is_straight_line_and_frees_buffers():
    exe = lowering.compile(build_axpy())
    assert "def f_main(" in exe.source
    assert "del " in exe.source
    assert "for " not in exe.source and "while " not in exe.source


def test_verifier_rejects_bad_ir():
    text = """
    builtin.module {
      func.func @main(%0: tensor<3xf32>, %1: tensor<4xf32>) -> tensor<3xf32> {
        %2 = hlo.add %0, %1 : (tensor<3xf32>, tensor<4xf32>) -> tensor<3xf32>
        func.return %2 : tensor<3xf32>
      }
    }"""
    with pytest.raises(HloVerifyError, match="hlo.add: operand shapes"):
        parse_module(text)
    with pytest.raises(MlirParseError):
        parse_module("builtin.module { func.func @main( }")


def test_layout_rank_mismatch_rejected_by_verifier():
    text = """
    builtin.module {
      func.func @main(%0: tensor<3xf32, #hlo.layout<{1,0}>>) -> tensor<3xf32> {
        %1 = hlo.negate %0 : (tensor<3xf32, #hlo.layout<{1,0}>>) -> tensor<3xf32>
        func.return %1 : tensor<3xf32>
      }
    }"""
    with pytest.raises(HloVerifyError, match="layout"):
        parse_module(text)


def test_generic_form_round_trip():
    from xdsl.printer import Printer
    import io

    module = build_axpy()
    out = io.StringIO()
    Printer(stream=out, print_generic_format=True).print_op(module)
    assert '"hlo.add"' in out.getvalue()
    assert parse_module(out.getvalue()).is_structurally_equivalent(module)


def test_xdsl_opt_knows_the_dialect(tmp_path):
    pytest.importorskip("importlib.metadata")
    from importlib.metadata import entry_points

    if not any(ep.name == "xla_dialect" for ep in entry_points(group="xdsl.universe")):
        pytest.skip("project not installed (xdsl.universe entry point missing)")
    path = tmp_path / "axpy.mlir"
    path.write_text(str(build_axpy()))
    # Run xdsl-opt's own entry function in a fresh interpreter, as the console script does.
    out = subprocess.run([sys.executable, "-c", "import sys; from xdsl.tools.xdsl_opt import main; sys.exit(main())",
                          str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "hlo.add" in out.stdout and "#hlo.layout<{0}>" in out.stdout


def test_xla_run_cli_on_a_file(tmp_path):
    from interop.tools.cli import xla_run_main

    path = tmp_path / "axpy.mlir"
    path.write_text(str(build_axpy()))
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.float32(2), arg1=np.ones(10, np.float32), arg2=np.ones(10, np.float32))
    assert xla_run_main([str(path), "--inputs", str(inputs)]) == 0
    assert xla_run_main([str(path)]) == 2  # missing inputs: clear error, no traceback


def test_function_names_that_are_not_python_identifiers():
    # `x²`.isalnum() is true but '²' cannot be part of a Python name: the generated code must not break.
    import numpy as np

    import lowering
    from xla_dialect import parse_module

    module = parse_module('''
    func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
      %y = hlo.call @"x²"(%x) : (tensor<2xf32>) -> tensor<2xf32>
      func.return %y : tensor<2xf32>
    }
    func.func private @"x²"(%x: tensor<2xf32>) -> tensor<2xf32> {
      %y = hlo.multiply %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      func.return %y : tensor<2xf32>
    }''')
    (out,) = lowering.compile(module)(np.array([2, 3], np.float32))
    assert out.tolist() == [4, 9]


@pytest.mark.parametrize("text,where", [('func.func @"' + "ab" * 5000, "1:12"),
                                        ('func.func @main() {\n  %0 = "hlo.constant"() {x = "a\nb"} : () -> tensor<f32>\n}',
                                         "2:30")])
def test_unterminated_string_literals_fail_fast(text, where):
    # xDSL's lexer regex takes exponential time on an unterminated string (28 characters: 5 s).
    import time

    from xla_dialect.errors import MlirParseError

    start = time.perf_counter()
    with pytest.raises(MlirParseError, match=f"{where}: string literal not closed"):
        parse_module(text)
    assert time.perf_counter() - start < 1.0


def _s32_f32_program():
    b = XlaBuilder("args")
    i = b.parameter(0, "s32[]")
    x = b.parameter(1, "f32[2]")
    b.tuple([i, x])
    return b.build()


def test_call_arguments_are_never_narrowed_silently():
    import numpy as np

    exe = lowering.compile(_s32_f32_program())
    ok = exe(np.int32(5), np.ones(2, np.float32))
    assert ok[0] == 5
    with pytest.raises(XlaError, match=r"argument #0.*got dtype int64"):
        exe(np.int64(2**40), np.ones(2, np.float32))
    with pytest.raises(XlaError, match=r"argument #1.*got dtype float64"):
        exe(np.int32(1), np.ones(2))
    # Python numbers and lists convert when every value survives...
    (i, x) = exe(7, [1.5, -2.0])
    assert i.dtype == np.int32 and x.dtype == np.float32 and x.tolist() == [1.5, -2.0]
    # ...and are rejected when one does not.
    with pytest.raises(XlaError, match="cannot hold exactly"):
        exe(2**40, [1.0, 2.0])
    with pytest.raises(XlaError, match="cannot hold exactly"):
        exe(1, [0.1, 1e300])
    with pytest.raises(XlaError, match="object"):
        exe(1, np.array([object(), 1], dtype=object))


def test_argument_conversion_options():
    import numpy as np

    lossless = lowering.compile(_s32_f32_program(), argument_conversion="lossless")
    assert lossless(np.int64(3), np.ones(2))[0] == 3
    with pytest.raises(XlaError, match="cannot hold exactly"):
        lossless(np.int64(2**40), np.ones(2))
    cast = lowering.compile(_s32_f32_program(), argument_conversion="cast")
    i, x = cast(np.int64(2**40 + 3), np.array([1e300, 0.1]))
    assert i == 3 and np.isinf(x[0])  # as NumPy's astype: the caller asked for it
    with pytest.raises(XlaError, match="argument_conversion"):
        lowering.compile(_s32_f32_program(), argument_conversion="maybe")


def test_memory_limit_follows_the_process_rlimit():
    """Under an address-space limit (a sandbox, the conformance workers) no array larger than it could be
    allocated: the default limit, and $XLA_DIALECT_MAX_BYTES, are capped by it (in a child process, whose
    limit this test may set)."""
    code = ("import resource\n"
            "from xla_dialect.limits import default_max_bytes, process_memory_limit\n"
            "soft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
            "limit = 3 << 30 if hard == resource.RLIM_INFINITY else min(3 << 30, hard)\n"
            "resource.setrlimit(resource.RLIMIT_AS, (limit, hard))\n"
            "print(limit, process_memory_limit(), default_max_bytes())\n")
    import os

    env = dict(os.environ, XLA_DIALECT_MAX_BYTES="1T")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    limit, seen, default = map(int, out.split())
    assert seen <= limit and default == seen
    env["XLA_DIALECT_MAX_BYTES"] = "1M"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert int(out.split()[2]) == 1 << 20


def test_memory_limit(monkeypatch):
    import numpy as np

    from xla_dialect.errors import ResourceLimitError

    b = XlaBuilder("big")
    x = b.parameter(0, "f32[2]")
    b.broadcast(x, [100000, 100000])
    with pytest.raises(ResourceLimitError, match=r"hlo.broadcast_in_dim: the result f32\[100000,100000,2\].*80,000,000,000"):
        lowering.compile(b.build())
    small = XlaBuilder("small")
    small.broadcast(small.parameter(0, "f32[2]"), [1000])
    module = small.build()
    assert lowering.compile(module, max_bytes="1M")(np.ones(2, np.float32))[0].shape == (1000, 2)
    with pytest.raises(ResourceLimitError, match="limit of 4,096"):
        lowering.compile(module, max_bytes=4096)
    monkeypatch.setenv("XLA_DIALECT_MAX_BYTES", "4K")
    with pytest.raises(ResourceLimitError, match="limit of 4,096"):
        lowering.compile(module)
    monkeypatch.delenv("XLA_DIALECT_MAX_BYTES")
    with pytest.raises(XlaError, match="max_bytes"):
        lowering.compile(module, max_bytes="lots")
    huge = "tensor<100000x100000x100xf32>"
    with pytest.raises(XlaError, match="needs 4,000,000,000,000 bytes"):  # before anything is allocated
        parse_module(f"func.func @main() -> {huge} {{\n  %0 = hlo.constant <0.0 : {huge}> : {huge}\n"
                     f"  func.return %0 : {huge}\n}}")
    from interop import import_jax

    with pytest.raises(XlaError, match="stablehlo.constant at <string>:2:8: .*needs 4,000,000,000,000 bytes"):
        import_jax(f"func.func @main() -> {huge} {{\n  %0 = stablehlo.constant dense<0.0> : {huge}\n"
                   f"  return %0 : {huge}\n}}")
