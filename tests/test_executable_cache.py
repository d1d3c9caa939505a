"""The cache of compiled programs (lowering/executor/executable_cache.py): a later process loads the executable
``lowering.compile`` stored, computes the same bits, and never gets one compiled for another module, option or
library; what cannot be stored faithfully is not stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import interop  # noqa: E402
import lowering  # noqa: E402
from lowering.executor import executable_cache  # noqa: E402
from lowering.runtime import cache_size  # noqa: E402
from lowering.runtime.options import CompileOptions  # noqa: E402
from xla_dialect.errors import UnsupportedError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh generated-code cache, the executable cache on (the test session turns it off: conftest.py)."""
    monkeypatch.setenv("XLA_DIALECT_CACHE", str(tmp_path))
    monkeypatch.setenv("XLA_DIALECT_EXECUTABLE_CACHE", "1")
    monkeypatch.setattr(executable_cache, "MIN_LOWERING_SECONDS", 0.0)  # (these programs lower in milliseconds)
    return tmp_path / "loops"


def _stored(directory) -> list[str]:
    executable_cache.wait()
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".exe")) if directory.exists() else []


def _bits(values) -> list[bytes]:
    return [np.asarray(v).tobytes() + str(np.asarray(v).dtype).encode() for v in values]


def _newton(x):
    def cond(s):
        return (s[1] < 30) & jnp.any(jnp.abs(s[0] * s[0] - x) > 1e-6)

    def body(s):
        y, i = s
        return 0.5 * (y + x / y), i + 1

    return jax.lax.while_loop(cond, body, (x, 0))


def _scan_with_scatter(x, idx):
    def step(c, xi):
        c = c.at[idx].add(xi * jnp.sin(c[:3].sum()))
        return c, jnp.tanh(c).sum()

    return jax.lax.scan(step, jnp.zeros(8, x.dtype), x)


def _chain(x, y):
    z = jnp.exp(x) * y - jnp.log1p(jnp.abs(y)) / (x * x + 1.0)
    return z, jnp.sort(z, axis=-1), jnp.float32(2.5) * jnp.ones((3, 4), jnp.float32)


def _solve_and_convolve(a, b, image, kernel):
    """LAPACK through custom calls (their result types are stored as text), a convolution through the BLAS scope
    (a module-level object of the library: stored by name, not copied)."""
    conv = jax.lax.conv_general_dilated(image, kernel, (1, 1), "SAME")
    return jnp.linalg.solve(a, b), jnp.linalg.cholesky(a @ a.T + 4 * jnp.eye(a.shape[0], dtype=a.dtype)), conv


PROGRAMS = {
    "newton": (_newton, lambda rng: (rng.uniform(1, 4, 64).astype(np.float32),)),
    "scan_scatter": (_scan_with_scatter, lambda rng: (rng.standard_normal((40, 3)).astype(np.float32),
                                                      np.array([1, 5, 1], np.int32))),
    "solve_conv": (_solve_and_convolve, lambda rng: (rng.standard_normal((6, 6)).astype(np.float32),
                                                  rng.standard_normal((6, 2)).astype(np.float32),
                                                  rng.standard_normal((2, 3, 9, 9)).astype(np.float32),
                                                  rng.standard_normal((4, 3, 3, 3)).astype(np.float32))),
    "chain": (_chain, lambda rng: (rng.standard_normal((64, 33)).astype(np.float32),
                                   rng.standard_normal((64, 33)).astype(np.float32))),
}


NOT_CLAIMED_BITWISE = {"solve_conv"}
"""Programs whose results the executor does not claim bitwise equal to jax.jit's (LAPACK's and the convolution's
summation orders on this host): the loaded executable is compared with the one that stored it."""


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_second_compilation_is_loaded_and_gives_the_same_bits(cache, name):
    fn, make = PROGRAMS[name]
    args = make(np.random.default_rng(0))
    module = interop.import_jax(jax.jit(fn), *args)
    first = lowering.compile(module, loop_compilation="always", fusion="always")
    assert not first.from_cache
    assert len(_stored(cache)) == 1, executable_cache.last_not_stored
    second = lowering.compile(module, loop_compilation="always", fusion="always")
    assert second.from_cache, executable_cache.last_miss
    expected = _bits(first(*args))
    if name not in NOT_CLAIMED_BITWISE:
        assert expected == _bits(jax.tree_util.tree_leaves(jax.jit(fn)(*args)))
    for _ in range(2):  # (the loaded one twice: its first call loads or compiles its units)
        assert _bits(second(*args)) == expected


def test_a_new_process_loads_the_executable_in_milliseconds(cache):
    """Two new processes compile the same program: the first lowers and stores it, the second loads it (its
    ``lowering.compile`` a load: no passes, no code generation) and computes the same bits."""
    script = textwrap.dedent(f"""
        import json, sys, time
        sys.path.insert(0, {ROOT!r})
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import numpy as np, jax
        import interop, lowering
        from lowering.executor import executable_cache
        from test_executable_cache import PROGRAMS
        executable_cache.MIN_LOWERING_SECONDS = 0.0  # (on a fast machine a small program lowers in under 10 ms)
        out = {{}}
        for name in sorted(PROGRAMS):
            fn, make = PROGRAMS[name]
            args = make(np.random.default_rng(0))
            module = interop.import_jax(jax.jit(fn), *args)
            began = time.perf_counter()
            exe = lowering.compile(module)
            seconds = time.perf_counter() - began
            out[name] = {{"from_cache": exe.from_cache, "seconds": seconds, "miss": executable_cache.last_miss,
                          "not_stored": executable_cache.last_not_stored,
                          "bits": [np.asarray(v).tobytes().hex() for v in exe(*args)]}}
        executable_cache.wait()
        print(json.dumps(out))
        """)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for name in PROGRAMS:
        assert not runs[0][name]["from_cache"]
        assert runs[1][name]["from_cache"], runs[1][name]["miss"]
        assert runs[1][name]["bits"] == runs[0][name]["bits"]


def test_the_key_sees_every_difference_the_text_shows():
    """Programs that differ only in a constant's sign of zero, a location or an option have other keys."""
    from xdsl.context import Context  # noqa: F401  (the importer's parser)

    def module_of(text):
        return interop.import_stablehlo(text)

    base = """
    func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
      %c = stablehlo.constant dense<ZERO> : tensor<4xf32>
      %y = stablehlo.add %x, %c : tensor<4xf32> LOC
      return %y : tensor<4xf32>
    }
    """
    positive = module_of(base.replace("ZERO", "0.0").replace("LOC", ""))
    negative = module_of(base.replace("ZERO", "-0.0").replace("LOC", ""))
    located = module_of(base.replace("ZERO", "0.0").replace("LOC", 'loc("a.py":3:4)'))
    options = CompileOptions()
    keys = {executable_cache.cache_key(executable_cache.module_digest(m), "main", options)
            for m in (positive, negative, located)}
    assert len(keys) == 3
    again = module_of(base.replace("ZERO", "0.0").replace("LOC", ""))
    assert executable_cache.module_digest(again) == executable_cache.module_digest(positive)
    digest = executable_cache.module_digest(positive)
    variants = {executable_cache.cache_key(digest, "main", CompileOptions(**change))
                for change in ({}, {"denormals": "keep"}, {"fusion": "never"}, {"loop_compilation": "never"},
                               {"xla_rewrites": False}, {"fma_contraction": False}, {"timeout": 5.0},
                               {"argument_conversion": "cast"}, {"max_bytes": 1 << 20}, {"blas_threads": 1})}
    assert len(variants) == 10
    assert executable_cache.cache_key(digest, "other", options) != executable_cache.cache_key(digest, "main", options)


def test_a_damaged_file_is_a_miss_and_is_replaced(cache):
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    module = interop.import_jax(jax.jit(lambda v: jnp.tanh(v) * 3.0), x)
    expected = _bits(lowering.compile(module)(x))
    (name,) = _stored(cache)
    (cache / name).write_bytes(b"not a pickle")
    again = lowering.compile(module)
    assert not again.from_cache and "unreadable" in executable_cache.last_miss
    assert _bits(again(x)) == expected
    assert _stored(cache) == [name]  # (stored again)
    assert lowering.compile(module).from_cache


def test_stored_constants_stay_read_only_and_results_are_the_callers(cache):
    """A constant result computed when lowering is shared by every call: the loaded executable hands out copies
    (its stored arrays keep their read-only flags), and broadcast views stay views."""
    x = np.arange(6, dtype=np.float32)
    module = interop.import_jax(jax.jit(lambda v: (v + 1.0, jnp.full((1000, 1000), 7.0, jnp.float32))), x)
    lowering.compile(module)
    loaded = lowering.compile(module)
    assert loaded.from_cache
    _, big = loaded(x)
    big[:] = 0.0
    assert np.all(loaded(x)[1] == 7.0)
    size = os.path.getsize(cache / _stored(cache)[0])
    assert size < 200_000  # (the 4 MB broadcast is stored as its one element)


def test_arrays_are_stored_with_their_flags_and_views():
    import io

    base = np.arange(10, dtype=np.float64)
    base.flags.writeable = False
    arrays = {"base": base, "slice": base[2:7], "broadcast": np.broadcast_to(base[3:4], (50, 50)),
              "writable": np.ones(3), "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
              "zero_d": np.array(-0.0, np.float32)}
    buffer = io.BytesIO()
    executable_cache._Pickler(buffer, {}, {}).dump(arrays)
    restored = executable_cache._Unpickler(io.BytesIO(buffer.getvalue()), {}).load()
    for name, array in arrays.items():
        got = restored[name]
        assert got.dtype == array.dtype and got.shape == array.shape and got.tobytes() == array.tobytes(), name
        assert got.flags.writeable == array.flags.writeable, name
    assert restored["broadcast"].strides == (0, 0)
    assert np.shares_memory(restored["slice"], restored["base"])
    assert len(buffer.getvalue()) < 2_000  # (the broadcast is not written out element by element)


def test_host_callbacks_are_those_of_the_module_it_is_loaded_for(cache):
    """A host callback's Python function is not stored: a loaded executable calls the function of the module it is
    loaded for (two programs whose text is the same, with other functions behind their callbacks)."""
    x = np.arange(4, dtype=np.float32)

    def program(scale):
        def f(v):
            y = jax.pure_callback(lambda a: np.asarray(a) * scale, jax.ShapeDtypeStruct(v.shape, v.dtype), v)
            return y + 1

        return interop.import_jax(jax.jit(f), x)

    first = lowering.compile(program(2))
    assert _bits(first(x)) == _bits([x * 2 + 1])
    assert len(_stored(cache)) == 1, executable_cache.last_not_stored
    second = lowering.compile(program(3))
    assert second.from_cache, executable_cache.last_miss
    assert _bits(second(x)) == _bits([x * 3 + 1])
    assert _bits(first(x)) == _bits([x * 2 + 1])


def test_what_cannot_be_stored_is_compiled_and_says_why(cache):
    """A custom-call target a script registered is outside the library (its registration is not in the key): the
    program is compiled every time, never stored."""
    from xla_dialect import XlaBuilder

    def double(operands, attributes, result_types):
        return operands[0] * 2

    lowering.register_custom_call("test_executable_cache_double", double)
    try:
        b = XlaBuilder("double")
        p = b.parameter(0, "f32[3]")
        b.custom_call("test_executable_cache_double", [p], "f32[3]")
        module = b.build()
        x = np.array([1, 2, 3], np.float32)
        assert _bits(lowering.compile(module)(x)) == _bits([x * 2])
        assert _stored(cache) == []
        assert "not cacheable" in executable_cache.last_not_stored  # (its kernel holds the function, result types)
        assert not lowering.compile(module).from_cache
        from lowering.runtime.program_state import Runtime

        with pytest.raises(executable_cache.NotCacheable, match="outside the library"):
            executable_cache.dumps({"k0": double}, Runtime(), "k0", "", False)
    finally:
        from lowering.runtime.program_state import unregister_custom_call

        unregister_custom_call("test_executable_cache_double")


def test_programs_lowered_in_a_few_milliseconds_are_not_stored(cache, monkeypatch):
    x = np.ones(4, np.float32)
    module = interop.import_jax(jax.jit(lambda v: v * 2.0), x)
    lowering.compile(module)  # (the first lowering in a process imports more: stored or not)
    executable_cache.wait()
    monkeypatch.setattr(executable_cache, "MIN_LOWERING_SECONDS", 10.0)
    other = interop.import_jax(jax.jit(lambda v: v * 3.0), x)
    lowering.compile(other)
    executable_cache.wait()
    assert "not worth storing" in executable_cache.last_not_stored
    assert not lowering.compile(other).from_cache


def test_a_module_the_digest_cannot_walk_is_lowered_as_without_the_cache(cache, monkeypatch):
    def fails(module, callbacks=None):
        raise RuntimeError("an attribute that cannot print")

    monkeypatch.setattr(executable_cache, "module_digest", fails)
    x = np.ones(4, np.float32)
    exe = lowering.compile(interop.import_jax(jax.jit(lambda v: v * 2.0), x))
    assert _bits(exe(x)) == _bits([x * 2]) and not exe.from_cache
    assert executable_cache.last_miss.startswith("no key (RuntimeError")
    assert _stored(cache) == []


def test_an_executable_larger_than_a_quarter_of_the_cache_limit_is_not_stored(cache, monkeypatch):
    monkeypatch.setenv("XLA_DIALECT_CACHE_SIZE", "100K")
    x = np.arange(8, dtype=np.float32)
    table = np.random.default_rng(0).standard_normal((200, 64)).astype(np.float32)  # (51 KB of constants)
    module = interop.import_jax(jax.jit(lambda v: (table @ jnp.tile(v, 8)) * 2.0), x)
    lowering.compile(module)
    assert _stored(cache) == []
    assert "a quarter of the cache's size limit" in executable_cache.last_not_stored


def test_switched_off_by_the_option_and_the_environment(cache, monkeypatch):
    x = np.ones(4, np.float32)
    module = interop.import_jax(jax.jit(lambda v: v * 2.0), x)
    lowering.compile(module, executable_cache=False)
    assert _stored(cache) == []
    monkeypatch.setenv("XLA_DIALECT_EXECUTABLE_CACHE", "off")
    lowering.compile(module)
    assert _stored(cache) == []
    monkeypatch.setenv("XLA_DIALECT_EXECUTABLE_CACHE", "maybe")
    with pytest.raises(UnsupportedError, match="XLA_DIALECT_EXECUTABLE_CACHE"):
        lowering.compile(module)
    monkeypatch.setenv("XLA_DIALECT_EXECUTABLE_CACHE", "1")
    lowering.compile(module)
    assert len(_stored(cache)) == 1


def test_stored_executables_count_toward_the_cache_size_and_are_cleared(cache):
    x = np.ones(4, np.float32)
    lowering.compile(interop.import_jax(jax.jit(lambda v: v * 2.0), x))
    (name,) = _stored(cache)
    entries = {e.name: e for e in cache_size.entries(str(cache))}
    assert name in entries and entries[name].size == os.path.getsize(cache / name)
    cache_size.clear(str(cache))
    assert _stored(cache) == []
