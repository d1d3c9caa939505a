"""numba's on-disk cache under several processes (lowering/runtime/numba_cache.py).

CI saw ``TypeError: can't unbox array from PyObject into native value`` on seven f32 x f64 dots of the conformance
corpus: two ``xla-conformance --jobs 2`` workers had saved two signatures of one kernel under the same data file
name, so the index named one signature and the file held the other's code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import lowering  # noqa: F401  (installs the cache fix)
from lowering.runtime import numba_cache

MODULE = textwrap.dedent(
    """
    import numba

    @numba.njit(cache=True)
    def total(x):
        s = x.dtype.type(0)
        for v in x:
            s += v
        return s
    """
)

SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {folder!r})
    if {with_fix!r}:
        import lowering
    import numpy as np
    import racy
    print(float(racy.total(np.arange(4, dtype={dtype!r}))))
    """
)


def _run(folder: str, cache_dir: str, dtype: str, with_fix: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    script = SCRIPT.format(folder=folder, dtype=dtype, with_fix=with_fix)
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)


def test_an_entry_holding_another_signatures_code_is_recompiled(tmp_path):
    # Build exactly what two racing processes leave behind: the index maps float32 to data file 1, and data file 1
    # holds the float64 overload. Without the check, loading it calls float64 code with a float32 array.
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "racy.py").write_text(MODULE)
    cache_f32, cache_f64 = str(tmp_path / "cache32"), str(tmp_path / "cache64")
    for cache, dtype in ((cache_f32, "float32"), (cache_f64, "float64")):
        done = _run(str(folder), cache, dtype)
        assert done.returncode == 0 and done.stdout.strip() == "6.0", done.stderr
    data_files = {}
    for cache in (cache_f32, cache_f64):
        for root, _, files in os.walk(cache):
            for name in files:
                if name.endswith(".1.nbc"):
                    data_files[cache] = os.path.join(root, name)
    assert set(data_files) == {cache_f32, cache_f64}
    shutil.copyfile(data_files[cache_f64], data_files[cache_f32])

    broken = _run(str(folder), cache_f32, "float32", with_fix=False)
    assert broken.returncode != 0 and "unbox" in broken.stderr, "the corrupted cache no longer reproduces the failure"
    healed = _run(str(folder), cache_f32, "float32")
    assert healed.returncode == 0 and healed.stdout.strip() == "6.0", healed.stderr
    again = _run(str(folder), cache_f32, "float32", with_fix=False)  # the entry was rewritten with the right code
    assert again.returncode == 0 and again.stdout.strip() == "6.0", again.stderr


@pytest.mark.skipif(numba_cache.fcntl is None, reason="file locks need POSIX fcntl")
def test_a_save_reads_and_writes_the_index_inside_an_exclusive_lock(tmp_path, monkeypatch):
    from numba.core import caching

    events = []
    real_flock = numba_cache.fcntl.flock

    def recording_flock(fd, operation):
        events.append(("flock", operation, os.readlink(f"/proc/self/fd/{fd}")))
        return real_flock(fd, operation)

    monkeypatch.setattr(numba_cache.fcntl, "flock", recording_flock)

    class RecordingCacheFile:  # what numba's save uses of an IndexDataCacheFile
        _index_path = str(tmp_path / "f.nbi")

        def _load_index(self):
            events.append("load index")
            return {}

        def _save_index(self, overloads):
            events.append("save index")

        def _save_data(self, name, data):
            events.append("save data")

        def _data_name(self, i):
            return f"f.{i}.nbc"

    caching.IndexDataCacheFile.save(RecordingCacheFile(), "key", "data")
    lock = str(tmp_path / "f.nbi.lock")
    assert events == [("flock", numba_cache.fcntl.LOCK_EX, lock), "load index", "save index", "save data",
                      ("flock", numba_cache.fcntl.LOCK_UN, lock)]


def test_install_is_idempotent_and_patches_numba():
    from numba.core import caching

    save = caching.IndexDataCacheFile.save
    numba_cache.install()
    assert caching.IndexDataCacheFile.save is save
    assert save.__wrapped__ is not save


PROGRAM = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import jax, jax.numpy as jnp
    from jax import lax
    import interop, lowering

    def f(x, y):
        big = jnp.sin(x) * np.float32(2.5) + x                # a fused group (65,536 elements)
        def body(i, c):                                        # a while loop
            return c * np.float32(0.5) + jnp.cos(c) * np.float32(0.25)
        looped = lax.fori_loop(0, 3, body, x)                  # (a large state: a loop of its own)
        return big, looped, jnp.tanh(y) * np.float32(3.0) + y  # straight-line small ops: a segment

    x = np.linspace(-3, 3, 1 << 16, dtype=np.float32)
    y = np.linspace(-1, 1, 8, dtype=np.float32)
    mode = sys.argv[1]
    exe = lowering.compile(interop.import_jax(f, x, y), loop_compilation=mode, fusion=mode)
    out = exe(x, y)
    dispatchers = [v for name, m in list(sys.modules.items()) if name.startswith("xla_dialect_")
                   for v in vars(m).values() if hasattr(v, "_cache_hits") and v.py_func.__module__ == name]
    print(json.dumps({"bits": [np.asarray(o).tobytes().hex() for o in out],
                      "loaded": sum(sum(d._cache_hits.values()) for d in dispatchers),
                      "compiled": sum(sum(d._cache_misses.values()) for d in dispatchers),
                      "registries": "numba.np.arraymath" in sys.modules}))
    """
)


def test_a_program_compiled_before_runs_its_machine_code_from_the_first_call(tmp_path):
    # loop_compilation="auto" interprets a program's loops, segments and fused groups until they are compiled
    # in the background (after 20 calls or enough iterations). A program an earlier process compiled has its
    # machine code in numba's cache: a new process loads it at the first call (numba_cache.has_machine_code)
    # instead of interpreting until a background compilation that only loads it.
    import json

    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    env = {**os.environ, "XLA_DIALECT_CACHE": str(tmp_path / "cache"), "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                          os.environ.get("PYTHONPATH", "")])}

    def run(mode: str) -> dict:
        done = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = run("always")  # compiles and caches everything
    assert first["compiled"] >= 3 and first["loaded"] == 0, first
    second = run("auto")   # a new process: loads, compiles nothing, the same bits
    assert second["compiled"] == 0 and second["loaded"] == first["compiled"], second
    assert second["bits"] == first["bits"]
    # A load installs none of numba's compiler registries (numba does before every load: ~0.3-0.5 s of imports,
    # scipy.linalg among them, the largest part of a warm start); the compiling process needed them.
    assert first["registries"] and not second["registries"], (first, second)


UFUNC_AFTER_A_LOAD = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import lowering
    from lowering.kernels import scalar

    f32 = np.dtype(np.float32)
    add = scalar.Scalar("add").function          # a library function: compiled, then loaded from numba's cache
    print(add(np.float32(1.5), np.float32(2.0)))
    multiply = scalar.ufunc(scalar.Scalar("multiply"), [f32, f32], f32)  # its loop: compiled, then loaded
    print(multiply(np.float32([1.5, -2.0]), np.float32([2.0, 0.5])).tolist())
    import jax, jax.numpy as jnp, interop
    jax.config.update("jax_enable_x64", True)

    def program(x, y, i):  # (ufuncs of other types: f64, s32, pred results, selects, conversions)
        z = x.astype(jnp.float64) * 3.0 - y
        return jnp.where(z > 0.5, z, -z), (i + 7) * i, (x < y.astype(jnp.float32)) | (i > 2)
    args = (np.float32([0.5, -1.0, 2.0]), np.float64([0.25, 1.0, -3.0]), np.int32([1, 2, 3]))
    out = lowering.compile(interop.import_jax(program, *args), fusion="never", loop_compilation="never")(*args)
    print(all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(out, jax.jit(program)(*args))))
    print("numba.np.arraymath" in sys.modules)
    """
)


def test_a_ufunc_is_loaded_whole_from_the_cache_without_numbas_registries(tmp_path):
    # The interpreter's ufuncs are numba cfuncs of their whole inner loop (lowering.kernels.ufunc_loops), cached on
    # disk: a later process loads them, loop included, without numba's registries (numba_cache.install) and without
    # generating code. (numba.vectorize generated its loop around the cached element function in every process,
    # 35-150 ms per ufunc, and needed some of numba's registries for that: a process that had only loaded cached
    # code failed in the loop builder, NumbaNotImplementedError.)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                          os.environ.get("PYTHONPATH", "")])}
    outputs = []
    for generated_code_cache in ("xla", "xla", "another"):
        done = subprocess.run([sys.executable, "-c", UFUNC_AFTER_A_LOAD], capture_output=True, text=True,
                              env={**env, "XLA_DIALECT_CACHE": str(tmp_path / generated_code_cache)}, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout.split())
    assert outputs[0][:4] == outputs[1][:4] == outputs[2][:4] == ["3.5", "[3.0,", "-1.0]", "True"], outputs
    # The second process compiled nothing (no registry, no scipy import); nor did the third, with a generated-code
    # cache of its own: the ufunc loops are kept with the library's machine code (NUMBA_CACHE_DIR here), compiled
    # once per installation.
    assert outputs[1][4] == outputs[2][4] == "False", outputs
    ufunc_modules = list((tmp_path / "numba" / "xla_dialect" / "ufuncs").glob("ufunc_*.py"))
    assert len(ufunc_modules) >= 2, ufunc_modules  # (multiply, and kernels of the program)
    assert not list(tmp_path.glob("*/loops/ufunc_*.py"))


def test_a_ufunc_of_a_scalar_definition_is_built_at_its_first_call():
    # numba took ~0.1 s to build each ufunc even from its cache, and kernels are made for every op of a program,
    # also those that only run inside compiled code: building at kernel construction cost a new process 0.4 s
    # of lowering.compile for an ODE solve that never called them.
    import numpy as np

    from lowering.kernels import scalar

    f64 = np.dtype(np.float64)
    lazy = scalar.LazyUfunc((scalar.Scalar("subtract"), (f64, f64), f64))
    assert lazy._ufunc is None and lazy.__name__ == "subtract"
    x = np.array([1.5, -0.0, np.inf])
    with np.errstate(invalid="ignore"):  # (inf - inf)
        np.testing.assert_array_equal(lazy(x, x), x - x)
    assert lazy._ufunc is not None and lazy.nin == 2  # (the ufunc's attributes once built)
    assert scalar.ufunc(scalar.Scalar("subtract"), [f64, f64], f64) is scalar.ufunc(
        scalar.Scalar("subtract"), [f64, f64], f64)


def test_the_librarys_cache_is_keyed_by_every_module_its_code_links(monkeypatch):
    """numba checks only the file that defines a cached function, but small_dot's kernels' machine code links
    chain_tiles: after a change to one of them its cached code ran the old callee (a crash, once). The library's
    functions are keyed by the source of every kernel and runtime module, so any change recompiles them; other
    functions keep numba's own key."""
    import numba
    from numba.core import types

    from lowering.kernels.small_dot import one_chain_kernel  # (links chain_tiles)

    array = types.Array(types.float32, 3, "C")
    signature = (array, array, array, types.int64)
    codegen = one_chain_kernel.targetctx.codegen()
    before = one_chain_kernel._cache._index_key(signature, codegen)
    assert before[-2] == numba_cache.library_digest()
    monkeypatch.setattr(numba_cache, "library_digest", lambda: "another source")
    assert one_chain_kernel._cache._index_key(signature, codegen)[-2] == "another source"

    @numba.njit(cache=True)
    def users_function(x):
        return x + 1

    key = users_function._cache._index_key((types.int64,), codegen)
    assert "another source" not in key


def test_the_librarys_cache_is_keyed_by_numbas_code_generation_settings(monkeypatch):
    """A cache filled by a run with NUMBA_ENABLE_PROFILING=1 (for perf) made diffrax's Tsit5 solve 1.8 times slower
    in every later run: numba's key does not hold its settings. The library's key does."""
    from numba.core import config, types

    from lowering.kernels.small_dot import one_chain_kernel

    array = types.Array(types.float32, 3, "C")
    signature = (array, array, array, types.int64)
    codegen = one_chain_kernel.targetctx.codegen()
    before = one_chain_kernel._cache._index_key(signature, codegen)
    for name, value in (("ENABLE_PROFILING", 1), ("OPT", 0), ("DEBUGINFO_DEFAULT", 1)):
        with monkeypatch.context() as m:
            m.setattr(config, name, value)
            assert one_chain_kernel._cache._index_key(signature, codegen) != before, name
    assert one_chain_kernel._cache._index_key(signature, codegen) == before


def test_library_modules_are_kept_with_the_librarys_machine_code(tmp_path, monkeypatch):
    # The ufunc loop modules belong to the library, not to a program: kept where numba keeps the library's machine
    # code ($NUMBA_CACHE_DIR when set), else beside the package, else -- nothing writable there -- in the
    # generated-code cache.
    from numba.core import config

    from lowering.runtime import generated_modules

    monkeypatch.setenv("XLA_DIALECT_CACHE", str(tmp_path / "xla"))
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba"))
    assert generated_modules.library_module_directory("ufuncs") == str(tmp_path / "numba" / "xla_dialect" / "ufuncs")
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setattr(config, "CACHE_DIR", str(blocked))  # (no directory can be made under a file)
    assert generated_modules.library_module_directory("ufuncs") == str(tmp_path / "xla" / "loops")
    monkeypatch.setattr(config, "CACHE_DIR", "")
    package = os.path.dirname(os.path.dirname(os.path.abspath(generated_modules.__file__)))
    writable = os.access(package, os.W_OK)  # (a read-only installation: the generated-code cache)
    expected = os.path.join(package, "__pycache__", "ufuncs") if writable else str(tmp_path / "xla" / "loops")
    assert generated_modules.library_module_directory("ufuncs") == expected
