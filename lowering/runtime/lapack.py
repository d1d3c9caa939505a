"""The LAPACK custom-call targets JAX emits on CPU, as built-in ``hlo.custom_call`` targets.

``jax.jit(jnp.linalg.cholesky).lower(x).as_text()`` on CPU contains
``stablehlo.custom_call @lapack_spotrf_ffi(...)``: JAX's linear algebra runs
jaxlib's typed-FFI wrappers around LAPACK. This module registers the same
targets (``lapack_{s,d,c,z}<routine>_ffi``) with
:func:`lowering.runtime.program_state.register_custom_call`, so imported JAX programs and
builder programs that call them run on the NumPy executor.

Each target returns exactly what jaxlib's kernel returns: the outputs LAPACK
leaves in its buffers, in jaxlib's result order (e.g. ``getrf``: the packed LU
factors, 1-based ``s32`` pivots and ``info``; ``potrf``: the factor in the
requested triangle with the other triangle of the input left as it was, and
``info``). Leading dimensions are batch dimensions: LAPACK runs once per matrix.

The routines are SciPy's LAPACK bindings (``scipy.linalg.lapack``), the very
library jaxlib loads its LAPACK kernels from, called with the workspace sizes
jaxlib uses, so results agree with JAX's bit for bit. Typed-FFI attributes
are the ``mhlo.backend_config`` characters (``uplo = 76 : ui8`` is ``'L'``).
Like jaxlib's kernels, the targets require every attribute they read: a call
without one (or with a value that is not one of the routine's letters) is an
:class:`~xla_dialect.errors.ExecutionError`, never a default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from xla_dialect.errors import ExecutionError, UnsupportedError

from .program_state import ResultSpec, register_custom_call

PREFIXES = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}
"""LAPACK type prefix -> element type of the matrices."""


def _attribute(attrs: Mapping, target: str, key: str):
    """Typed-FFI attribute ``key`` of the call: jaxlib's kernels require every attribute they declare,
    so a missing one is an error (never a default, which could silently run another computation)."""
    cfg = attrs.get("backend_config")
    if not isinstance(cfg, Mapping):
        raise ExecutionError(f"custom-call target {target!r} needs its typed-FFI attribute {key!r}, but the call "
                             f"has no attribute dictionary (backend_config is {cfg!r}; typed-FFI attributes are a "
                             f"dictionary in backend_config or mhlo.backend_config)")
    if key not in cfg:
        raise ExecutionError(f"custom-call target {target!r} needs the typed-FFI attribute {key!r}, which the "
                             f"call does not have (it has {sorted(cfg) or 'none'})")
    return cfg[key]


def _char(attrs: Mapping, target: str, key: str, allowed: str) -> str:
    """A typed-FFI character attribute (``76 : ui8`` or ``'L'``) as a one-letter string, one of ``allowed``."""
    value = _attribute(attrs, target, key)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 256:
        value = chr(value)
    if not isinstance(value, str) or value not in allowed or len(value) != 1:
        raise ExecutionError(f"custom-call target {target!r}: attribute {key!r} = {value!r} is not one of the "
                             f"characters {', '.join(allowed)} (as ui8 codes: "
                             f"{', '.join(str(ord(c)) for c in allowed)})")
    return value


def _integer(attrs: Mapping, target: str, key: str) -> int:
    """A typed-FFI integer attribute (``1 : i32``)."""
    value = _attribute(attrs, target, key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ExecutionError(f"custom-call target {target!r}: attribute {key!r} = {value!r} is not an integer")
    return value


def _optimal(work) -> int:
    """The optimal workspace size a LAPACK workspace query (``lwork = -1``) reports, as jaxlib uses it."""
    return max(1, int(np.real(np.ravel(work)[0])))


def _fortran(a: np.ndarray) -> np.ndarray:
    """A column-major copy for LAPACK to overwrite in place (what it leaves there is jaxlib's output)."""
    return np.array(a, order="F", copy=True)


def _fn(prefix: str, routine: str):
    """SciPy's binding of LAPACK routine ``<prefix><routine>``."""
    import scipy.linalg.lapack as lapack  # (imported at first use: 0.18 s of every new process's start)

    return getattr(lapack, prefix + routine)


def _per_matrix(target: str, inputs: Sequence[np.ndarray], in_dims: Sequence[int],
                outputs: Sequence[np.ndarray], out_dims: Sequence[int], body: Callable) -> None:
    """Run ``body`` on every matrix of the batch, writing its results into ``outputs``.

    ``in_dims``/``out_dims`` give how many trailing dimensions of each array
    belong to one problem (the rest are batch dimensions); ``body`` takes one
    problem's inputs and returns one value per output (None: leave it as is).
    """
    ins = [a.reshape((-1,) + a.shape[a.ndim - d:]) for a, d in zip(inputs, in_dims)]
    outs = [a.reshape((-1,) + a.shape[a.ndim - d:]) for a, d in zip(outputs, out_dims)]
    try:
        for i in range(len(ins[0])):
            for out, value in zip(outs, body(*(x[i] for x in ins))):
                if value is not None:
                    out[i] = value
    except (ValueError, TypeError) as e:  # SciPy's argument checks
        raise ExecutionError(f"custom-call target {target!r}: LAPACK call failed: {e}") from None


def _buffers(specs: Sequence[ResultSpec], *copied: np.ndarray) -> list[np.ndarray]:
    """Result buffers: the first ones start as copies of ``copied`` (LAPACK works in place), the rest as zeros."""
    out = [np.zeros(s.shape, s.dtype) for s in specs]
    for buf, src in zip(out, copied):
        buf[...] = src
    return out


def _empty(a: np.ndarray) -> bool:
    """A batch of empty matrices: LAPACK has nothing to do."""
    return 0 in a.shape[-2:]


# ----------------------------------------------------------------------------
# Targets: each factory takes the type prefix and returns fn(operands, attrs, specs).
# ----------------------------------------------------------------------------


def _potrf(p: str, target: str):
    potrf = _fn(p, "potrf")

    def run(operands, attrs, specs):
        (a,) = operands
        out, info = _buffers(specs, a)
        lower = _char(attrs, target, "uplo", "LU") == "L"
        if not _empty(a):
            _per_matrix(target, [a], [2], [out, info], [2, 0], lambda x: potrf(x, lower=lower, clean=0))
        return out, info

    return run


def _getrf(p: str, target: str):
    getrf = _fn(p, "getrf")

    def one(x):
        lu, piv, info = getrf(x)
        return lu, piv + 1, info  # SciPy hands out 0-based pivots; LAPACK's (and jaxlib's) are 1-based

    def run(operands, attrs, specs):
        (a,) = operands
        out, ipiv, info = _buffers(specs, a)
        if not _empty(a):
            _per_matrix(target, [a], [2], [out, ipiv, info], [2, 1, 0], one)
        return out, ipiv, info

    return run


def _geqrf(p: str, target: str):
    geqrf, query = _fn(p, "geqrf"), _fn(p, "geqrf_lwork")

    def run(operands, attrs, specs):
        (a,) = operands
        out, tau = _buffers(specs, a)
        if not _empty(a):
            lwork = _optimal(query(*a.shape[-2:])[0])
            _per_matrix(target, [a], [2], [out, tau], [2, 1], lambda x: geqrf(x, lwork=lwork)[:2])
        return out, tau

    return run


def _orgqr(p: str, target: str):
    orgqr = _fn(p, "ungqr" if p in "cz" else "orgqr")

    def run(operands, attrs, specs):
        a, tau = operands
        (out,) = _buffers(specs, a)
        if not _empty(a):
            m, n = a.shape[-2:]
            lwork = _optimal(orgqr(np.zeros((m, n), a.dtype), np.zeros(tau.shape[-1:], tau.dtype), lwork=-1)[1])
            _per_matrix(target, [a, tau], [2, 1], [out], [2], lambda x, t: orgqr(x, t, lwork=lwork)[:1])
        return out

    return run


def _geqp3(p: str, target: str):
    geqp3 = _fn(p, "geqp3")

    def run(operands, attrs, specs):
        a, jpvt_in = operands
        if np.any(jpvt_in != 0):
            raise UnsupportedError(f"custom-call target {target!r}: only free column pivoting (an all-zero jpvt "
                                   f"operand) is supported")
        out, jpvt, tau = _buffers(specs, a)
        if not _empty(a):
            lwork = _optimal(geqp3(np.zeros(a.shape[-2:], a.dtype), lwork=-1)[3])
            # SciPy's geqp3 binding returns LAPACK's 1-based pivots unchanged.
            _per_matrix(target, [a], [2], [out, jpvt, tau], [2, 1, 1], lambda x: geqp3(x, lwork=lwork)[:3])
        return out, jpvt, tau

    return run


def _syevd(p: str, target: str):
    syevd = _fn(p, "heevd" if p in "cz" else "syevd")

    def run(operands, attrs, specs):
        (a,) = operands
        out, w, info = _buffers(specs, a)
        vectors = _char(attrs, target, "mode", "VN") == "V"
        lower = _char(attrs, target, "uplo", "LU") == "L"
        if not _empty(a):
            # SciPy's default workspaces are LAPACK's documented minimum sizes, the ones jaxlib allocates.
            def one(x):
                x = _fortran(x)
                values, vecs, info_ = syevd(x, compute_v=int(vectors), lower=int(lower), overwrite_a=1)
                return vecs, values, info_
            _per_matrix(target, [a], [2], [out, w, info], [2, 1, 0], one)
        return out, w, info

    return run


def _svd(routine: str):
    """gesdd and gesvd: results (a overwritten, s, u, vt, info); mode A (full), S (reduced) or N (values only)."""

    def factory(p: str, target: str):
        svd, query = _fn(p, routine), _fn(p, routine + "_lwork")

        def run(operands, attrs, specs):
            (a,) = operands
            out, s, u, vt, info = _buffers(specs, a)
            mode = _char(attrs, target, "mode", "ASNO")  # jaxlib's modes
            if mode == "O":
                raise UnsupportedError(f"custom-call target {target!r}: SVD mode 'O' is not supported (only A, S "
                                       f"and N, the modes JAX uses)")
            compute_uv, full = int(mode != "N"), int(mode == "A")
            if not _empty(a):
                lwork = _optimal(query(*a.shape[-2:], compute_uv=compute_uv, full_matrices=full)[0])

                def one(x):
                    x = _fortran(x)  # LAPACK leaves its scratch in a: that is jaxlib's first output
                    u_, s_, vt_, info_ = svd(x, compute_uv=compute_uv, full_matrices=full, lwork=lwork,
                                             overwrite_a=1)
                    return x, s_, (u_ if compute_uv else None), (vt_ if compute_uv else None), info_
                _per_matrix(target, [a], [2], [out, s, u, vt, info], [2, 1, 2, 2, 0], one)
            return out, s, u, vt, info

        return run

    return factory


_TRSM_CODES = {"side": {"L": 0, "R": 1}, "uplo": {"U": 0, "L": 1}, "trans_x": {"N": 0, "T": 1, "C": 2},
               "diag": {"N": 0, "U": 1}}
"""jaxlib's trsm attribute letters -> SciPy's BLAS trsm flags."""


def trsm_letters(attrs: Mapping, target: str) -> dict[str, str]:
    """The letters of a ``lapack_?trsm_ffi`` call (side, uplo, trans_x, diag: BLAS's ``side``, ``uplo``,
    ``transa``, ``diag``), checked; also read by its compiled form (:mod:`lowering.runtime.lapack_compiled`)."""
    return {key: _char(attrs, target, key, "".join(codes)) for key, codes in _TRSM_CODES.items()}


def _trsm(p: str, target: str):
    import scipy.linalg.blas as blas

    trsm = getattr(blas, p + "trsm")

    def run(operands, attrs, specs):
        x, y = operands[:2]
        alpha = operands[2].item() if len(operands) > 2 else 1  # older jaxlib passes alpha as an operand
        (out,) = _buffers(specs, y)
        flags = {key: _TRSM_CODES[key][letter] for key, letter in trsm_letters(attrs, target).items()}
        if not _empty(y):
            _per_matrix(target, [x, y], [2, 2], [out], [2],
                        lambda a, b: (trsm(alpha, a, b, side=flags["side"], lower=flags["uplo"],
                                           trans_a=flags["trans_x"], diag=flags["diag"]),))
        return out

    return run


def _unpack_eigenvectors(wi: np.ndarray, v: np.ndarray) -> np.ndarray:
    """LAPACK's real eigenvector storage as complex vectors (pairs of columns for conjugate pairs)."""
    out = v.astype(np.result_type(v.dtype, np.complex64))
    pairs = np.flatnonzero(wi > 0)
    pairs = pairs[pairs + 1 < len(wi)]
    out[:, pairs] = v[:, pairs] + 1j * v[:, pairs + 1]
    out[:, pairs + 1] = v[:, pairs] - 1j * v[:, pairs + 1]
    return out


def _geev(p: str, target: str):
    geev, query = _fn(p, "geev"), _fn(p, "geev_lwork")
    real = p in "sd"

    def run(operands, attrs, specs):
        (a,) = operands
        buffers = _buffers(specs)
        left, right = (int(_char(attrs, target, key, "NV") == "V") for key in ("compute_left", "compute_right"))
        if not _empty(a):
            n = a.shape[-1]
            lwork = _optimal(query(n, compute_vl=left, compute_vr=right)[0])

            def one(x):
                if not np.isfinite(x).all():  # jaxlib skips LAPACK and reports info = -4
                    return (None,) * (len(buffers) - 1) + (-4,)
                if real:
                    wr, wi, vl, vr, info_ = geev(x, compute_vl=left, compute_vr=right, lwork=lwork)
                    ok = info_ == 0
                    return (wr, wi, _unpack_eigenvectors(wi, vl) if ok and left else None,
                            _unpack_eigenvectors(wi, vr) if ok and right else None, info_)
                w, vl, vr, info_ = geev(x, compute_vl=left, compute_vr=right, lwork=lwork)
                return w, vl if left else None, vr if right else None, info_
            dims = [1, 1, 2, 2, 0] if real else [1, 2, 2, 0]
            _per_matrix(target, [a], [2], buffers, dims, one)
        return tuple(buffers)

    return run


def _gees(p: str, target: str):
    gees = _fn(p, "gees")
    real = p in "sd"

    def run(operands, attrs, specs):
        (a,) = operands
        buffers = _buffers(specs, a)
        vectors = int(_char(attrs, target, "mode", "VN") == "V")
        if _char(attrs, target, "sort", "NS") != "N":
            raise UnsupportedError(f"custom-call target {target!r}: ordering eigenvalues (sort = 'S') is not "
                                   f"implemented (jaxlib does not implement it either)")
        if not _empty(a):
            n = a.shape[-1]
            lwork = _optimal(gees(lambda *_: None, np.zeros((n, n), a.dtype), compute_v=vectors, lwork=-1)[-2])

            def one(x):
                t, sdim, *eig, vs, _, info_ = gees(lambda *_: None, x, compute_v=vectors, lwork=lwork)
                return (t, vs if vectors else None, *eig, sdim, info_)
            dims = [2, 2, 1, 1, 0, 0] if real else [2, 2, 1, 0, 0]
            _per_matrix(target, [a], [2], buffers, dims, one)
        return tuple(buffers)

    return run


def _gehrd(p: str, target: str):
    gehrd, query = _fn(p, "gehrd"), _fn(p, "gehrd_lwork")

    def run(operands, attrs, specs):
        (a,) = operands
        out, tau, info = _buffers(specs, a)
        n = a.shape[-1]
        low, high = (_integer(attrs, target, key) for key in ("low", "high"))  # LAPACK's 1-based ilo, ihi
        if not _empty(a):
            lwork = _optimal(query(n, lo=low - 1, hi=high - 1)[0])
            _per_matrix(target, [a], [2], [out, tau, info], [2, 1, 0],
                        lambda x: gehrd(x, lo=low - 1, hi=high - 1, lwork=lwork))
        return out, tau, info

    return run


def _sytrd(p: str, target: str):
    sytrd, query = _fn(p, "hetrd" if p in "cz" else "sytrd"), _fn(p, "hetrd_lwork" if p in "cz" else "sytrd_lwork")

    def run(operands, attrs, specs):
        (a,) = operands
        out, d, e, tau, info = _buffers(specs, a)
        lower = int(_char(attrs, target, "uplo", "LU") == "L")
        if not _empty(a):
            lwork = _optimal(query(a.shape[-1], lower=1)[0])  # jaxlib queries with uplo = 'L'
            _per_matrix(target, [a], [2], [out, d, e, tau, info], [2, 1, 1, 1, 0],
                        lambda x: sytrd(x, lower=lower, lwork=lwork))
        return out, d, e, tau, info

    return run


def _gtsv(p: str, target: str):
    gtsv = _fn(p, "gtsv")

    def one(dl, d, du, b):
        # jaxlib's dl and du have n entries (dl[0] and du[-1] unused); LAPACK's have n - 1.
        du2, d_, du_, x, info_ = gtsv(dl[1:], d, du[:-1], b)
        return np.concatenate([dl[:1], du2]), d_, np.concatenate([du_, du[-1:]]), x, info_

    def run(operands, attrs, specs):
        dl, d, du, b = operands
        outs = _buffers(specs, dl, d, du, b)
        if d.shape[-1] and b.shape[-1]:
            _per_matrix(target, [dl, d, du, b], [1, 1, 1, 2], outs, [1, 1, 1, 2, 0], one)
        return tuple(outs)

    return run


TARGETS: dict[str, Callable[[str, str], Callable]] = {
    "potrf": _potrf,
    "getrf": _getrf,
    "geqrf": _geqrf,
    "orgqr": _orgqr,
    "ungqr": _orgqr,
    "geqp3": _geqp3,
    "syevd": _syevd,
    "heevd": _syevd,
    "gesdd": _svd("gesdd"),
    "gesvd": _svd("gesvd"),
    "trsm": _trsm,
    "geev": _geev,
    "gees": _gees,
    "gehrd": _gehrd,
    "sytrd": _sytrd,
    "hetrd": _sytrd,
    "gtsv": _gtsv,
}
"""LAPACK routine (as named in jaxlib's targets) -> factory ``(prefix, target name) -> target``."""

_COMPLEX_ONLY = {"ungqr", "heevd", "hetrd"}
_REAL_ONLY = {"orgqr", "syevd", "sytrd"}


def lapack_targets() -> dict[str, Callable]:
    """Every ``lapack_<p><routine>_ffi`` target name -> implementation."""
    out = {}
    for routine, factory in TARGETS.items():
        for p in PREFIXES:
            if (routine in _COMPLEX_ONLY and p in "sd") or (routine in _REAL_ONLY and p in "cz"):
                continue
            name = f"lapack_{p}{routine}_ffi"
            out[name] = _typed(p, name, factory(p, name))
    return out


def _typed(p: str, name: str, run: Callable) -> Callable:
    """``run``, after checking the operand matrix has the target's element type (as XLA's FFI binding does)."""
    want = np.dtype(PREFIXES[p])

    def target(operands, attrs, specs):
        if not operands or operands[0].dtype != want:
            got = operands[0].dtype if operands else "no operand"
            raise ExecutionError(f"custom-call target {name!r} takes {want} matrices, got {got}")
        return run(operands, attrs, specs)

    return target


for _name, _target in lapack_targets().items():
    register_custom_call(_name, _target)
