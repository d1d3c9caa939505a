"""Test helpers: run builder programs on the executor and compare with jax.jit."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

import lowering

INSPECTS_THE_LOWERING = pytest.mark.skipif(
    os.environ.get("XLA_DIALECT_EXECUTABLE_CACHE", "").strip().lower() == "roundtrip",
    reason="inspects the IR behind the executable's compiled segments, which a stored executable does not keep "
           "(XLA_DIALECT_EXECUTABLE_CACHE=roundtrip)")
"""Marks a test that reads the ops of a compiled segment (``CompiledSegment.segment``): skipped when the suite runs
with every executable read back from its stored form (docs/executor.md)."""


def execute(module, *args):
    """Compile ``module`` with the NumPy executor and run it; returns the result tuple."""
    return lowering.compile(module)(*args)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ULP distance between two float arrays of the same dtype (NaN vs NaN counts 0)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.dtype.kind == "c":
        return np.maximum(ulp_distance(a.real, b.real), ulp_distance(a.imag, b.imag))
    bits = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    ia = a.view(bits).astype(np.int64)
    ib = b.view(bits).astype(np.int64)
    magnitude = np.int64(np.iinfo(bits).max)  # every bit but the sign
    # sign-magnitude -> ordinal
    oa = np.where(ia < 0, -(ia & magnitude), ia)
    ob = np.where(ib < 0, -(ib & magnitude), ib)
    # Same sign: the int64 difference is exact (and cannot overflow). Opposite signs: the sum of the two
    # magnitudes can overflow int64, so it is taken in float (it is huge anyway). A float difference of two
    # f64 ordinals (~2**62) would round to multiples of 512 ULP.
    same_sign = (oa < 0) == (ob < 0)
    d = np.where(same_sign, np.abs(np.where(same_sign, oa - ob, 0)).astype(np.float64),
                 np.abs(oa.astype(np.float64)) + np.abs(ob.astype(np.float64)))
    both_nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    return np.where(both_nan, 0, d)


def assert_close(actual, expected, max_ulp: int = 0, atol: float = 0.0, err_msg: str = ""):
    """Exact for ints/bools; floats within ``max_ulp`` ULPs (or ``atol``), NaN where NaN.

    Shapes and dtypes must match exactly.
    """
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{err_msg} shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{err_msg} dtype {actual.dtype} != {expected.dtype}"
    if actual.dtype.kind in "biu" or actual.dtype.itemsize == 0:
        np.testing.assert_array_equal(actual, expected, err_msg=err_msg)
        return
    if actual.dtype.kind not in "fc":  # ml_dtypes floats have kind 'V'
        try:
            ml_dtypes.finfo(actual.dtype)  # np.finfo does not know bf16, f8, ...
        except Exception:  # sub-byte integers from ml_dtypes
            np.testing.assert_array_equal(actual.astype(np.int64), expected.astype(np.int64), err_msg=err_msg)
            return
    d = ulp_distance(actual, expected)
    if atol:
        wide = np.complex128 if actual.dtype.kind == "c" else np.float64
        with np.errstate(invalid="ignore"):  # inf - inf: not close by atol; the ULP check decides
            close = np.abs(actual.astype(wide) - expected.astype(wide)) <= atol
        d = np.where(close, 0, d)
    bad = d > max_ulp
    if bad.any():
        idx = np.argwhere(bad)[:5]
        raise AssertionError(
            f"{err_msg} {int(bad.sum())} of {bad.size} elements differ by more than {max_ulp} ULP "
            f"(max {int(d.max())}); first at {idx.tolist()}: actual {actual[tuple(idx[0])]!r} "
            f"expected {expected[tuple(idx[0])]!r}"
        )


def random_array(rng, shape, dtype, special: bool = False) -> np.ndarray:
    """Random values of any XLA dtype (NumPy or ml_dtypes): normal floats, full-range ints, fair bools.

    ``special`` mixes NaN, +-Inf and -0.0 into floating-point (and complex) arrays.
    """
    import ml_dtypes

    dtype = np.dtype(dtype)
    shape = tuple(shape)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind == "c":
        out = np.empty(shape, dtype)
        out.real = random_array(rng, shape, out.real.dtype, special)
        out.imag = random_array(rng, shape, out.real.dtype, special)
        return out
    try:
        info = ml_dtypes.iinfo(dtype)
    except (ValueError, TypeError):
        info = None
    if info is not None:
        return rng.integers(int(info.min), int(info.max), size=shape, endpoint=True).astype(dtype)
    values = rng.standard_normal(shape) * (4 if dtype.itemsize > 1 else 1)
    if special and values.size:
        flat = values.reshape(-1)
        picks = rng.choice(flat.size, size=min(4, flat.size), replace=False)
        flat[picks] = [np.nan, np.inf, -np.inf, -0.0][: len(picks)]
    return values.astype(dtype)


def run_builder(fn, *args, name: str = "test"):
    """Build a program with one parameter per array in ``args`` and run it on them.

    ``fn(builder, *params)`` returns the root XlaOp (or a list of them); the
    result is the executor's output (a single array when there is one root).
    """
    from xla_dialect import XlaBuilder
    from xla_dialect.types import element_type_from_dtype

    b = XlaBuilder(name)
    params = []
    for i, a in enumerate(args):
        a = np.asarray(a)
        dims = ",".join(str(d) for d in a.shape)
        params.append(b.parameter(i, f"{element_type_from_dtype(a.dtype).xla_name}[{dims}]"))
    root = fn(b, *params)
    outs = execute(b.build(root), *args)
    return outs[0] if len(outs) == 1 else outs


def in_forked_child(work, timeout: float = 120.0) -> bytes:
    """Run ``work()`` (returning up to 64 bytes) in a child forked from this process and return what it
    returned; fails the test if the child crashed (GNU OpenMP aborts a forked child that starts a parallel
    region its parent used) or did not finish in ``timeout`` seconds (it is killed: never a hung suite)."""
    import os
    import signal
    import time

    import pytest

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without cleanup
        try:
            os.write(write, work())
        finally:
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + timeout
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"the forked child did not finish in {timeout:.0f} s")
    status = done[1]
    message = os.read(read, 64)
    os.close(read)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    return message


class JaxReferences:
    """jax.jit references of independent programs computed together: ``add(key, fn, *args)`` registers
    ``fn(*args)`` (NumPy arrays in, arrays or a tuple/list of arrays out); ``self[key]`` returns its result
    (NumPy arrays), computing every registered reference in one jax.jit on first use. One XLA compilation of
    the batch costs about half of one per reference (each is compiled at all on a slow tracing and lowering
    path). Only for references whose programs XLA cannot combine: each takes its own arguments, so every
    instruction of the batch reads only its own parameters and computes what it computes in a program of its
    own (no shared operand for a rewrite or a sibling fusion to see). Should the batch fail (an op XLA rejects),
    each reference is computed alone, so each test reports its own error."""

    def __init__(self):
        self.calls = {}
        self.results = None

    def add(self, key, fn, *args):
        assert key not in self.calls, key
        self.calls[key] = (fn, tuple(np.asarray(a) for a in args))

    def args(self, key):
        return self.calls[key][1]

    def __getitem__(self, key):
        import jax

        if self.results is None:
            keys = list(self.calls)

            def run(*flat):
                outs, i = [], 0
                for k in keys:
                    fn, args = self.calls[k]
                    outs.append(fn(*flat[i:i + len(args)]))
                    i += len(args)
                return outs

            try:
                outs = jax.jit(run)(*[a for k in keys for a in self.calls[k][1]])
                self.results = {k: jax.tree.map(np.asarray, o) for k, o in zip(keys, outs, strict=True)}
            except Exception:  # each alone below: the failing one raises in its own test
                self.results = {}
        if key not in self.results:
            fn, args = self.calls[key]
            self.results[key] = jax.tree.map(np.asarray, jax.jit(fn)(*args))
        return self.results[key]


def json_from_jax_subprocess(script: str, timeout: float = 600) -> dict:
    """Run ``script`` in a fresh Python (the project on its path, jax on the CPU) and return the JSON it prints
    on a line starting ``RESULT ``: for programs that must set ``XLA_FLAGS`` (a host device count) before jax
    starts, which conftest.py has already imported here."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, done.stderr[-3000:]
    return json.loads(line[len("RESULT "):])


LIBRARY_PACKAGES = ("xla_dialect", "passes", "lowering", "interop")


def library_sources(packages=LIBRARY_PACKAGES):
    """The library's source files (``pathlib.Path``, sorted) in ``packages``: every ``.py`` file except those under a
    ``__pycache__`` directory (where the library keeps generated modules of its own next to numba's machine code:
    ``lowering/__pycache__/ufuncs``)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.relative_to(root).parts:
                yield path


def library_lines(pattern):
    """(path relative to the repository, line number, the file's lines) of every line of the library's packages
    (xla_dialect, passes, lowering, interop) that ``pattern`` (a compiled regex) matches."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    for path in library_sources():
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines, 1):
            if pattern.search(line):
                yield path.relative_to(root).as_posix(), n, lines


def sweep(*axes, ids=None, keep: int | None = None):
    """The cartesian product of ``axes`` (lists of values, or of tuples of values) as ``pytest.param``s for one
    ``parametrize`` over all their names: a few combinations in the default run, the rest marked ``slow`` (run by
    ``pytest -m slow``).

    The default run keeps the diagonal ``(i mod len(axis) for each axis)``, ``i`` up to the longest axis: every
    value of every axis appears, each beside changing partners. ``keep`` fewer: ``keep`` points, spread evenly
    over each axis longer than that (its other values are left to the slow run), cycling through the others. ``ids``: per axis, a function from
    a value to its id part (``str`` by default); parts are joined with ``-``."""
    import itertools

    import pytest

    ids = ids or [str] * len(axes)
    longest = max(len(axis) for axis in axes)
    keep = longest if keep is None else min(keep, longest)
    # (point j: an axis longer than ``keep`` at j * len / keep, spread over it; a shorter one cycles through it)
    diagonal = {tuple(j * len(axis) // keep if len(axis) > keep else j % len(axis) for axis in axes)
                for j in range(keep)}
    params = []
    for combo in itertools.product(*[list(enumerate(axis)) for axis in axes]):
        values = []
        for _, value in combo:
            values.extend(value if isinstance(value, tuple) else (value,))
        name = "-".join(f(v) for f, (_, v) in zip(ids, combo))
        kept = tuple(i for i, _ in combo) in diagonal
        params.append(pytest.param(*values, id=name, marks=() if kept else pytest.mark.slow))
    return params


def mark_unsampled_slow(items) -> None:
    """``@pytest.mark.sample(k)`` on a parametrized test: ``k`` of its cases run by default, the others are marked
    ``slow`` (``pytest -m slow`` runs them). For sweeps whose cases exercise one path on many shapes or programs,
    to keep the default run near ten minutes (issue 28). The cases kept are :func:`sweep`'s diagonal: case ``j``
    takes, of each parameter with more than ``k`` values, value ``j * len / k``, and of the others value
    ``j mod len`` -- every value of a short axis appears, a long axis is spread over."""
    import pytest

    families: dict[tuple, list] = {}
    for item in items:
        marker = item.get_closest_marker("sample")
        if marker is not None and getattr(item, "callspec", None) is not None:
            families.setdefault((item.path, item.originalname, marker.args[0]), []).append(item)
    for (_, _, keep), family in families.items():
        if keep >= len(family):
            continue
        sizes: dict[str, int] = {}
        for item in family:
            for name, index in item.callspec.indices.items():
                sizes[name] = max(sizes.get(name, 0), index + 1)
        kept = {tuple(j * n // keep if n > keep else j % n for n in sizes.values()) for j in range(keep)}
        for item in family:
            if tuple(item.callspec.indices[name] for name in sizes) not in kept:
                item.add_marker(pytest.mark.slow)
