"""lowering.runtime.options.CompileOptions: lowering.compile's options resolved and validated once, in one frozen object
that the executor, its context and the kernels read."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import lowering
from lowering.kernels.context import KernelContext
from lowering.runtime.options import MODES, CompileOptions
from xla_dialect import XlaBuilder
from xla_dialect.errors import ExecutionError, UnsupportedError


def _module():
    b = XlaBuilder("twice")
    x = b.parameter(0, "f32[3]")
    return b.build(b.add(x, x))


def test_options_are_resolved_once_and_frozen(monkeypatch):
    monkeypatch.setenv("XLA_DIALECT_LOOP_COMPILATION", "never")
    monkeypatch.setenv("XLA_DIALECT_FUSION", "always")
    monkeypatch.setenv("XLA_DIALECT_MAX_BYTES", "1G")
    options = CompileOptions()
    assert options.denormals in ("flush", "keep") and options.flush == (options.denormals == "flush")
    assert (options.loop_compilation, options.fusion, options.max_bytes) == ("never", "always", 1 << 30)
    monkeypatch.setenv("XLA_DIALECT_FUSION", "never")  # read when the object was made, not later
    assert options.fusion == "always"
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.denormals = "keep"  # type: ignore[misc]
    assert dataclasses.replace(options) == options  # resolving a resolved object changes nothing
    assert CompileOptions(probe=object()).loop_compilation == "never"


def test_a_bad_mode_names_the_option(monkeypatch):
    for option in ("loop_compilation", "fusion"):
        with pytest.raises(UnsupportedError, match=f"{option} must be one of auto, always, never, got 'sometimes'"):
            CompileOptions(**{option: "sometimes"})
    monkeypatch.setenv("XLA_DIALECT_FUSION", "bogus")
    with pytest.raises(UnsupportedError, match="fusion must be one of"):
        CompileOptions()
    assert MODES == ("auto", "always", "never")


def test_keywords_and_the_object_are_the_same_call():
    x = np.array([1.0, -2.0, 3.5], np.float32)
    options = CompileOptions(denormals="keep", timeout=5, argument_conversion="lossless")
    by_object = lowering.compile(_module(), options=options)
    positional = lowering.compile(_module(), options)
    by_keywords = lowering.compile(_module(), denormals="keep", timeout=5, argument_conversion="lossless")
    for exe in (by_object, positional, by_keywords):
        assert (exe.denormals, exe.timeout, exe.argument_conversion) == ("keep", 5, "lossless")
        np.testing.assert_array_equal(exe(x)[0], x + x)
    both = lowering.compile(_module(), options=options, timeout=7)  # keywords replace the object's fields
    assert (both.timeout, both.denormals) == (7, "keep")


@pytest.mark.parametrize("bad, error, words", [
    ({"denormals": "sometimes"}, ExecutionError, "denormals"),
    ({"fusion": "maybe"}, UnsupportedError, "fusion"),
    ({"loop_compilation": 3}, UnsupportedError, "loop_compilation"),
    ({"timeout": 0}, ExecutionError, "timeout"),
    ({"blas_threads": 0}, ExecutionError, "blas_threads"),
    ({"fma_contraction": "yes"}, ExecutionError, "fma_contraction"),
    ({"argument_conversion": "round"}, ExecutionError, "argument_conversion"),
    ({"num_partitions": 0}, ExecutionError, "num_partitions"),
    ({"max_bytes": "lots"}, Exception, "max_bytes"),
])
def test_bad_values_raise_the_projects_errors_naming_the_option(bad, error, words):
    with pytest.raises(error, match=words):
        lowering.compile(_module(), **bad)
    with pytest.raises(error, match=words):
        CompileOptions(**bad)


def test_unknown_keywords_and_objects_are_rejected():
    with pytest.raises(TypeError):
        lowering.compile(_module(), denormal="keep")
    with pytest.raises(ExecutionError, match="options"):
        lowering.compile(_module(), options={"denormals": "keep"})


def test_the_context_reads_the_object():
    options = CompileOptions(denormals="keep", loop_compilation="always", fusion="never", timeout=3, blas_threads=2)
    ctx = KernelContext(_module(), options=options)
    assert ctx.options is options
    assert (ctx.denormals, ctx.flush, ctx.loop_compilation, ctx.fusion, ctx.timeout, ctx.blas_threads) == (
        "keep", False, "always", "never", 3, 2)
    plain = KernelContext(_module())  # a context of its own (fold-constants): loops and fusion "auto"
    assert (plain.loop_compilation, plain.fusion) == ("auto", "auto")
