"""JAX's LAPACK-backed linear algebra through every import route, against jax.jit, bit for bit.

Each program runs on the executor imported three ways: from StableHLO
(``interop.import_jax``), from HLO text before XLA's optimizations
(``lower(...).as_text(dialect="hlo")``) and from the optimized HLO text
(``lower(...).compile().as_text()``, both through ``interop.import_hlo``). The
LAPACK custom calls are typed-FFI calls whose flags (``uplo``, ``trans_x``,
``mode``...) StableHLO carries in ``mhlo.backend_config`` and HLO text in
``backend_config={uplo = 76 : ui8, ...}``; every flag variant below runs, so a
flag lost on one route (a default run instead) shows as a wrong result. The
targets are the LAPACK routines jaxlib calls, so results are compared exactly,
as tests/test_effects.py compares whole JAX linear-algebra programs.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax import lax

import lowering
from interop import export_hlo, import_hlo, import_jax, run_hlo_on_xla
from xla_dialect import XlaBuilder
from xla_dialect.errors import ExecutionError, HloParseError, UnsupportedError

from helpers import assert_close


def _spd(a):
    return a @ np.swapaxes(a, -1, -2) + 4 * np.eye(a.shape[-1], dtype=a.dtype)


def _triangular(a):
    return a + 4 * np.eye(a.shape[-1], dtype=a.dtype)


def _tridiagonal(a, b):
    """gtsv's operands: dl (first entry unused, 0), d, du (last entry unused, 0), right-hand sides."""
    zero = np.zeros(1, a.dtype)
    return np.concatenate([zero, a[0, 1:]]), a[1] + 4, np.concatenate([a[2, :-1], zero]), b


PROGRAMS = {
    # name: (function, operands from a 4x4 matrix a and 4x2 right-hand sides b)
    "solve": (jnp.linalg.solve, lambda a, b: (a, b[:, 0])),
    "solve_batched": (jnp.linalg.solve, lambda a, b: (np.stack([a, _spd(a)]), np.stack([b, -b]))),
    "inv": (jnp.linalg.inv, lambda a, b: (a,)),
    "det": (jnp.linalg.det, lambda a, b: (a,)),
    "slogdet": (jnp.linalg.slogdet, lambda a, b: (a,)),
    "cholesky": (jnp.linalg.cholesky, lambda a, b: (_spd(a),)),
    "cholesky_upper": (lambda m: jnp.linalg.cholesky(m, upper=True), lambda a, b: (_spd(a),)),
    "cho_factor_solve": (lambda m, y: [jsl.cho_solve(jsl.cho_factor(m, lower=lower), y) for lower in (True, False)],
                         lambda a, b: (_spd(a), b)),
    "qr": (jnp.linalg.qr, lambda a, b: (a[:, :3],)),
    "qr_complete": (lambda m: jnp.linalg.qr(m, mode="complete"), lambda a, b: (a[:, :3],)),
    "qr_pivoting": (lambda m: jsl.qr(m, pivoting=True), lambda a, b: (a[:, :3],)),
    "eigh": (jnp.linalg.eigh, lambda a, b: (_spd(a),)),
    "eigh_upper": (lambda m: jnp.linalg.eigh(m, UPLO="U"), lambda a, b: (_spd(a) + np.triu(a, 1),)),
    "eigvalsh": (jnp.linalg.eigvalsh, lambda a, b: (_spd(a),)),
    "svd": (jnp.linalg.svd, lambda a, b: (a[:, :3],)),
    "svd_reduced": (lambda m: jnp.linalg.svd(m, full_matrices=False), lambda a, b: (a[:, :3],)),
    "svdvals": (lambda m: jnp.linalg.svd(m, compute_uv=False), lambda a, b: (a,)),
    "pinv": (jnp.linalg.pinv, lambda a, b: (a[:, :3],)),
    "lstsq": (lambda m, y: jnp.linalg.lstsq(m, y)[0], lambda a, b: (a[:, :3], b)),
    "lu": (jsl.lu, lambda a, b: (a,)),
    "lu_factor_solve": (lambda m, y: [jsl.lu_solve(jsl.lu_factor(m), y, trans=t) for t in (0, 1, 2)],
                        lambda a, b: (a, b)),
    "solve_triangular": (lambda m, y: [jsl.solve_triangular(m, y, lower=lower, trans=t, unit_diagonal=unit)
                                       for lower in (True, False) for t in (0, 1, 2) for unit in (False, True)],
                         lambda a, b: (_triangular(a), b)),
    "triangular_solve_right": (lambda m, y: [lax.linalg.triangular_solve(m, y, left_side=False, lower=lower,
                                                                          transpose_a=t)
                                             for lower in (True, False) for t in (False, True)],
                               lambda a, b: (_triangular(a), b.T.copy())),
    "eig": (jnp.linalg.eig, lambda a, b: (a,)),
    "eigvals": (jnp.linalg.eigvals, lambda a, b: (a,)),
    "schur": (jsl.schur, lambda a, b: (a,)),
    "hessenberg": (lambda m: jsl.hessenberg(m, calc_q=True), lambda a, b: (a,)),
    "tridiagonal": (lax.linalg.tridiagonal, lambda a, b: (_spd(a),)),
    "tridiagonal_solve": (lax.linalg.tridiagonal_solve, _tridiagonal),
}

DTYPES = {"f32": np.float32, "f64": np.float64}


def _operands(name: str, dtype):
    rng = np.random.default_rng(sorted(PROGRAMS).index(name))
    a, b = rng.standard_normal((4, 4)).astype(dtype), rng.standard_normal((4, 2)).astype(dtype)
    return PROGRAMS[name][1](a, b)


def _routes(fn, args) -> dict:
    """The program imported each way."""
    lowered = jax.jit(fn).lower(*args)
    return {"stablehlo": import_jax(fn, *args), "hlo": import_hlo(lowered.as_text(dialect="hlo")),
            "hlo_optimized": import_hlo(lowered.compile().as_text())}


def _outputs(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.sample(20)
def test_linalg_every_route_matches_jax(name, dtype):
    fn = PROGRAMS[name][0]
    args = _operands(name, dtype)
    want = [np.asarray(w) for w in jax.tree.leaves(jax.jit(fn)(*args))]
    for route, module in _routes(fn, args).items():
        got = _outputs(lowering.compile(module)(*args))
        assert len(got) == len(want), f"{name} via {route}: {len(got)} outputs, jax.jit gives {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, err_msg=f"{name} ({np.dtype(dtype).name}) via {route}, output #{i}")


def _ffi_calls(module) -> list:
    """(target, typed-FFI attributes) of every custom call, in a canonical order."""
    calls = [(op.call_target_name.data, op.properties.get("mhlo.backend_config")) for op in module.walk()
             if op.name == "hlo.custom_call"]
    return sorted(calls, key=str)


@pytest.mark.parametrize("name", ["solve_triangular", "eigh_upper", "svd_reduced", "eig", "hessenberg"])
def test_hlo_text_keeps_typed_ffi_attributes_as_stablehlo_does(name):
    """HLO text's backend_config={...} becomes the same mhlo.backend_config the StableHLO importer gives;
    printing the module back writes the same dictionaries, and reading that gives the same attributes."""
    fn = PROGRAMS[name][0]
    args = _operands(name, np.float64)
    routes = _routes(fn, args)
    expected = _ffi_calls(routes["stablehlo"])
    assert expected and all(attrs is not None for _, attrs in expected)
    assert _ffi_calls(routes["hlo"]) == expected
    text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    written = export_hlo(routes["hlo"])
    configs = sorted(re.findall(r"backend_config=(\{[^}]*\})", written))
    assert configs == sorted(re.findall(r"backend_config=(\{[^}]*\})", text))
    assert written.count("api_version=API_VERSION_TYPED_FFI") == len(expected)
    assert _ffi_calls(import_hlo(written)) == expected


def test_typed_ffi_calls_printed_as_text_run_on_xla():
    """A StableHLO import printed as HLO text keeps the typed-FFI flags and the column-major result
    layouts of the LAPACK calls, and an HLO-text import printed as StableHLO keeps the flags where XLA
    reads them at api_version = 4: XLA compiling either computes what jax.jit does."""
    from interop import run_xla

    def fn(m, y):
        return jsl.solve_triangular(m, y, lower=False, trans=1, unit_diagonal=True)

    args = _operands("solve_triangular", np.float64)
    want = np.asarray(jax.jit(fn)(*args))
    module = import_jax(fn, *args)
    assert "backend_config={diag = 85 : ui8, side = 76 : ui8, trans_x = 84 : ui8, uplo = 85 : ui8}" in export_hlo(module)
    for run, imported in ((run_hlo_on_xla, module), (run_xla, _routes(fn, args)["hlo"])):
        (got,) = _outputs(run(imported, *args))
        assert_close(got, want, err_msg=run.__name__)


# ----------------------------------------------------------------------------
# A flag the target cannot read is an error, never a default
# ----------------------------------------------------------------------------


def _solve_text() -> tuple[str, tuple]:
    args = _operands("solve", np.float64)
    return jax.jit(jnp.linalg.solve).lower(*args).as_text(dialect="hlo"), args


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace("diag = 85 : ui8, ", ""),
     r"'lapack_dtrsm_ffi' needs the typed-FFI attribute 'diag', which the call does not have"),
    (lambda t: t.replace("uplo = 76 : ui8", "uplo = 88 : ui8"),
     r"'lapack_dtrsm_ffi': attribute 'uplo' = 'X' is not one of the characters U, L"),
    (lambda t: t.replace("trans_x = 78 : ui8", "trans_x = 1.5 : f32"),
     r"'lapack_dtrsm_ffi': attribute 'trans_x' = 1.5 is not one of the characters N, T, C"),
    (lambda t: re.sub(r"backend_config=\{diag[^}]*\}", "backend_config={}", t),
     r"'lapack_dtrsm_ffi' needs the typed-FFI attribute '(diag|side|trans_x|uplo)'"),
], ids=["missing", "bad_letter", "not_a_letter", "empty"])
def test_missing_or_unreadable_ffi_flag_is_an_error(edit, message):
    text, args = _solve_text()
    edited = edit(text)
    assert edited != text
    run = lowering.compile(import_hlo(edited))
    with pytest.raises(ExecutionError, match=message):
        run(*args)


def test_malformed_ffi_dictionary_is_an_import_error():
    text, _ = _solve_text()
    with pytest.raises(HloParseError, match=r"attribute backend_config: typed-FFI attributes"):
        import_hlo(text.replace("diag = 85 : ui8", "diag = ", 1))


def test_every_lapack_flag_is_required():
    """Builder calls without their attributes (or with an opaque string) fail naming target and attribute."""
    cases = [("lapack_spotrf_ffi", "(f32[3,3], s32[])", "uplo"),
             ("lapack_ssyevd_ffi", "(f32[3,3], f32[3], s32[])", "mode"),
             ("lapack_ssytrd_ffi", "(f32[3,3], f32[3], f32[2], f32[2], s32[])", "uplo"),
             ("lapack_sgesdd_ffi", "(f32[3,3], f32[3], f32[3,3], f32[3,3], s32[])", "mode"),
             ("lapack_sgeev_ffi", "(f32[3], f32[3], c64[3,3], c64[3,3], s32[])", "compute_left"),
             ("lapack_sgees_ffi", "(f32[3,3], f32[3,3], f32[3], f32[3], s32[], s32[])", "mode"),
             ("lapack_sgehrd_ffi", "(f32[3,3], f32[2], s32[])", "low")]
    x = np.eye(3, dtype=np.float32)
    for target, shape, key in cases:
        b = XlaBuilder("flags")
        b.custom_call(target, [b.parameter(0, "f32[3,3]")], shape, backend_config={})
        with pytest.raises(ExecutionError, match=rf"'{target}' needs the typed-FFI attribute '{key}'"):
            lowering.compile(b.build())(x)
    b = XlaBuilder("opaque")
    b.custom_call("lapack_spotrf_ffi", [b.parameter(0, "f32[3,3]")], "(f32[3,3], s32[])",
                  opaque="{uplo = 76 : ui8}", api_version=4)
    with pytest.raises(ExecutionError, match=r"'lapack_spotrf_ffi' needs its typed-FFI attribute 'uplo', but the "
                                             r"call has no attribute dictionary"):
        lowering.compile(b.build())(x)
    b = XlaBuilder("svd_o")
    b.custom_call("lapack_sgesdd_ffi", [b.parameter(0, "f32[3,3]")], "(f32[3,3], f32[3], f32[3,3], f32[3,3], s32[])",
                  backend_config={"mode": np.uint8(ord("O"))})
    with pytest.raises(UnsupportedError, match=r"'lapack_sgesdd_ffi': SVD mode 'O' is not supported"):
        lowering.compile(b.build())(x)
