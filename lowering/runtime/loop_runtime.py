"""numba functions the compiled loops of :mod:`lowering.executor.compiled_loops` call (compiled on first use,
cached on disk by numba).

The machinery generated code needs beside the ops' scalar definitions (which are
:mod:`lowering.kernels.scalar`): the hardware FMA intrinsic those definitions use, float constants from
their bits, the CPU's MXCSR, and the CBLAS gemm calls a compiled dot makes. (XLA CPU's summation order,
which generated code also calls, is :mod:`lowering.kernels.tree_sum`.)
"""

from __future__ import annotations

import llvmlite.ir as ir
import numpy as np
import numba
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .process_state import at_fork_in_child

_njit = numba.njit(cache=True, error_model="numpy")


@intrinsic
def fused_multiply_add(typingctx, a, b, c):
    """LLVM's fma on three f32 or three f64 scalars: ``a * b + c`` rounded once."""
    if a != b or a != c or a not in (types.float32, types.float64):
        return None
    ir_type = ir.FloatType() if a == types.float32 else ir.DoubleType()

    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.fma", [ir_type], ir.FunctionType(ir_type, [ir_type] * 3))
        return builder.call(fn, args)

    return a(a, a, a), codegen


@intrinsic
def kept(typingctx, x):
    """The float ``x`` unchanged, through an empty inline-assembly statement LLVM cannot see through: the value
    reaches the code after it as an unknown of its type. Why: LLVM's simplifier folds values (``floor(floor(x))``
    to ``floor(x)``) and then turns ``select(a > b, b, a)`` into the min instruction, which reads a denormal as
    zero under denormals-are-zero; XLA sees no such pattern where one of the values was computed in another fused
    loop (an op it moves out of a while loop), and keeps the denormal. No instruction is emitted."""
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, signature, args):
        value_type = context.get_value_type(signature.return_type)
        return builder.asm(ir.FunctionType(value_type, [value_type]), "", "=x,0", [args[0]], False)

    return x(x), codegen


def _c_view_of(context, builder, signature, args, result, start=None, owner: bool = True):
    """The code of a C-contiguous view (type ``result``) of C-contiguous array ``args[0]`` with the static shape
    ``args[-1]`` (a tuple of ints), from element ``start`` (an intp value; None: the first); without ``owner``, a
    view with no owner (a null meminfo and parent)."""
    from numba.core.imputils import impl_ret_borrowed
    from numba.np.arrayobj import make_array, populate_array

    source = make_array(signature.args[0])(context, builder, args[0])
    view = make_array(result)(context, builder)
    intp = context.get_value_type(types.intp)
    dims = [context.cast(builder, d, t, types.intp)
            for d, t in zip(cgutils.unpack_tuple(builder, args[-1]), signature.args[-1])]
    strides = [None] * len(dims)
    stride = source.itemsize
    for i in reversed(range(len(dims))):
        strides[i] = stride
        stride = builder.mul(stride, dims[i])
    populate_array(view, data=source.data if start is None else builder.gep(source.data, [start]),
                   shape=cgutils.pack_array(builder, dims, intp), strides=cgutils.pack_array(builder, strides, intp),
                   itemsize=source.itemsize,
                   meminfo=source.meminfo if owner else cgutils.get_null_value(source.meminfo.type),
                   parent=source.parent if owner else cgutils.get_null_value(source.parent.type))
    return impl_ret_borrowed(context, builder, result, view._getvalue()) if owner else view._getvalue()


def _static_shape(shape) -> bool:
    """Whether ``shape`` is typed as a non-empty tuple of integers."""
    return isinstance(shape, types.BaseTuple) and len(shape) > 0 and all(isinstance(d, types.Integer) for d in shape)


@intrinsic
def _c_reshaped(typingctx, array, shape):
    """A C-contiguous view of C-contiguous ``array`` with the static ``shape`` (a tuple of ints of the same
    element count, which the generated code guarantees): the new array header only, without the runtime checks
    and the call of numba's general reshape (about 15-25 ns each, several per iteration of a small loop)."""
    if not (isinstance(array, types.Array) and array.layout == "C" and _static_shape(shape)):
        return None
    result = array.copy(ndim=len(shape), layout="C")

    def codegen(context, builder, signature, args):
        return _c_view_of(context, builder, signature, args, result)

    return result(array, shape), codegen


@intrinsic
def _packed_view(typingctx, buffer, offset, shape, borrowed):
    """A C-contiguous array of static ``shape`` whose elements start at element ``offset`` of the 1-d C-contiguous
    ``buffer`` (the generated code guarantees that they fit): the array header only, sharing the buffer's
    reference count, or with ``borrowed`` (a literal bool) without an owner -- counting it is then a null test,
    not an atomic operation, and the caller keeps ``buffer`` alive and copies such a view before returning it
    (:func:`owned`)."""
    if not (isinstance(buffer, types.Array) and buffer.layout == "C" and buffer.ndim == 1
            and isinstance(offset, types.Integer) and _static_shape(shape)
            and isinstance(borrowed, types.BooleanLiteral)):
        return None
    result = buffer.copy(ndim=len(shape), layout="C")

    def codegen(context, builder, signature, args):
        start = context.cast(builder, args[1], signature.args[1], types.intp)
        return _c_view_of(context, builder, signature.replace(args=(signature.args[0], signature.args[2])),
                          (args[0], args[2]), result, start, owner=borrowed.literal_value is False)

    return result(buffer, offset, shape, borrowed), codegen


@numba.njit(cache=True, nogil=True, forceinline=True)
def packed_array(buffer, offset, shape):
    """The constant array of ``shape`` at element ``offset`` of ``buffer``, one of the arrays a generated function
    receives its constants packed in (:mod:`lowering.executor.constant_packing`): a view, no copy."""
    return _packed_view(buffer, offset, shape, False)


@numba.njit(cache=True, nogil=True, forceinline=True)
def borrowed_array(buffer, offset, shape):
    """:func:`packed_array` without an owner: for a function that keeps ``buffer`` (its argument) alive while it
    runs and passes each value it returns through :func:`owned`."""
    return _packed_view(buffer, offset, shape, True)


@intrinsic
def unowned_view(typingctx, array):
    """``array`` as a view without an owner (a null meminfo and parent): binding it to other names, slicing it
    and passing it on then count no references (a null test each, not an atomic operation). For buffers a
    generated function allocates once per call (its prologue) and reads through such views: the function keeps the
    owner itself alive to its end (:func:`keep_alive`) and copies such a view before returning it (:func:`owned`)."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, signature, args):
        from numba.np.arrayobj import make_array

        view = make_array(signature.args[0])(context, builder, args[0])
        view.meminfo = cgutils.get_null_value(view.meminfo.type)
        view.parent = cgutils.get_null_value(view.parent.type)
        return view._getvalue()

    return array(array), codegen


@intrinsic
def keep_alive(typingctx, values):
    """Nothing, but a use of ``values``: numba releases a variable after its last use, and a buffer read through
    :func:`unowned_view` must live until the function returns."""
    def codegen(context, builder, signature, args):
        return context.get_dummy_value()

    return types.none(values), codegen


@intrinsic
def _has_owner(typingctx, array):
    """Whether ``array`` has an owner (a reference-counted memory block) -- not a view of :func:`borrowed_array`."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, signature, args):
        from numba.np.arrayobj import make_array

        meminfo = make_array(signature.args[0])(context, builder, args[0]).meminfo
        return builder.icmp_unsigned("!=", meminfo, cgutils.get_null_value(meminfo.type))

    return types.boolean(array), codegen


def _owned(value):
    return value


@numba.extending.overload(_owned)
def _owned_overload(value):
    if isinstance(value, types.Array):
        return lambda value: value if _has_owner(value) else value.copy()
    return lambda value: value


@numba.njit(cache=True, nogil=True, forceinline=True)
def owned(value):
    """``value``, or a copy of an array without an owner (:func:`borrowed_array`): what a generated function returns
    to Python outlives the constants it was called with."""
    return _owned(value)


def _any_view(array, shape):
    return np.ascontiguousarray(array).reshape(shape)


@numba.extending.overload(_any_view)
def _any_view_overload(array, shape):
    if isinstance(array, types.Array) and array.layout == "C":
        return lambda array, shape: _c_reshaped(array, shape)
    return lambda array, shape: np.ascontiguousarray(array).reshape(shape)


@numba.njit(cache=True, nogil=True, error_model="numpy", forceinline=True)
def denormal_as_zero(x):
    """A float ``x`` as the CPU reads it under denormals-are-zero: a denormal is a zero of its sign (NaN is not
    below the smallest normal, so it stays). One definition for the scalar kernels (flushing max/min/select) and
    the units that flush as hardware does (AMX's bf16 tiles in :mod:`lowering.kernels.small_dot`)."""
    return np.copysign(x - x, x) if abs(x) < np.finfo(x).tiny else x


@numba.njit(cache=True, nogil=True, forceinline=True)
def c_view(array, shape):
    """``np.ascontiguousarray(array).reshape(shape)`` in generated loops: a header-only view when ``array`` is
    typed C-contiguous (:func:`_c_reshaped`), else numba's own reshape of a contiguous copy. (A cached function:
    numba compiles an overload's implementation in every process, 0.1 s per array type and shape, ~1.5 s of
    random.gamma's first compilation.)"""
    return _any_view(array, shape)


@intrinsic
def float_from_bits(typingctx, bits):
    """The float with IEEE bit pattern ``bits``: an int32 gives an f32, an int64 an f64 (a bit cast; a
    subnormal constant passed this way is not flushed by the caller's MXCSR on its way in, as a float
    argument converted through a double would be, and it stays a register, hoisted out of loops)."""
    if bits == types.int32:
        result, ir_type = types.float32, ir.FloatType()
    elif bits == types.int64:
        result, ir_type = types.float64, ir.DoubleType()
    else:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir_type)

    return result(bits), codegen


def _gemm_function(builder, address, real):
    """The ILP64 CBLAS ``?gemm`` at the int64 ``address`` as a callable LLVM value, and the pointer type of its
    matrices, for element type ``real`` (LLVM float or double)."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    ptr = real.as_pointer()
    gemm_type = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, real, ptr, i64, ptr, i64, real, ptr,
                                                i64])
    return builder.inttoptr(address, gemm_type.as_pointer()), ptr


def _matrix_gemm(address, a, b, c, columns: bool):
    """Typing and code of :func:`cblas_gemm` (``columns`` False) and :func:`cblas_gemm_columns` (True, two more
    int64 arguments: the first and the stop column): None when the arguments are not C-ordered 2-d f32 or f64
    arrays of one type."""
    arrays = (a, b, c)
    if not (address == types.int64 and all(isinstance(x, types.Array) and x.ndim == 2 and x.layout == "C"
                                           for x in arrays) and a.dtype == b.dtype == c.dtype
            and a.dtype in (types.float32, types.float64)):
        return None
    real = ir.FloatType() if a.dtype == types.float32 else ir.DoubleType()
    i32 = ir.IntType(32)

    def codegen(context, builder, signature, args):
        fn, ptr = _gemm_function(builder, args[0], real)
        views = [context.make_array(t)(context, builder, v) for t, v in zip(signature.args[1:4], args[1:4])]
        (m, k), (_, n) = (cgutils.unpack_tuple(builder, views[0].shape, 2),
                          cgutils.unpack_tuple(builder, views[1].shape, 2))
        data = [builder.bitcast(v.data, ptr) for v in views]
        b_data, c_data, width = data[1], data[2], n
        if columns:  # the column views b[:, first:stop], c[:, first:stop], whose rows stay n apart
            first, stop = args[4], args[5]
            b_data, c_data, width = builder.gep(b_data, [first]), builder.gep(c_data, [first]), builder.sub(stop, first)
        row_major, no_trans = ir.Constant(i32, 101), ir.Constant(i32, 111)
        builder.call(fn, [row_major, no_trans, no_trans, m, width, k, ir.Constant(real, 1.0), data[0], k, b_data, n,
                          ir.Constant(real, 0.0), c_data, n])
        return context.get_dummy_value()

    extra = (types.int64, types.int64) if columns else ()
    return types.none(types.int64, a, b, c, *extra), codegen


@intrinsic
def cblas_gemm(typingctx, address, a, b, c):
    """``c = a @ b`` for C-ordered 2-d f32 or f64 arrays, through the ILP64 CBLAS gemm at ``address``
    (:func:`lowering.runtime.blas.numpy_gemm_address`) with the arguments NumPy's matmul passes for such operands:
    row-major, no transposes, alpha 1, beta 0, leading dimensions the row lengths."""
    return _matrix_gemm(address, a, b, c, columns=False)


@intrinsic
def cblas_gemv(typingctx, address, a, b, c):
    """``c = a @ b`` for a 1-d ``a`` (k) and a C-ordered 2-d ``b`` (k, n) of f32 or f64, through the ILP64 CBLAS
    gemv at ``address`` (:func:`lowering.runtime.blas.numpy_gemv_address`) with the arguments NumPy's matmul passes for
    a vector times a matrix: ``b`` read row-major and transposed, alpha 1, beta 0, unit strides."""
    if not (address == types.int64 and isinstance(a, types.Array) and isinstance(b, types.Array)
            and isinstance(c, types.Array) and (a.ndim, b.ndim, c.ndim) == (1, 2, 1)
            and all(x.layout == "C" for x in (a, b, c)) and a.dtype == b.dtype == c.dtype
            and a.dtype in (types.float32, types.float64)):
        return None
    real = ir.FloatType() if a.dtype == types.float32 else ir.DoubleType()

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        ptr = real.as_pointer()
        gemv_type = ir.FunctionType(ir.VoidType(), [i32, i32, i64, i64, real, ptr, i64, ptr, i64, real, ptr, i64])
        fn = builder.inttoptr(args[0], gemv_type.as_pointer())
        views = [context.make_array(t)(context, builder, v) for t, v in zip(signature.args[1:4], args[1:4])]
        k, n = cgutils.unpack_tuple(builder, views[1].shape, 2)
        data = [builder.bitcast(v.data, ptr) for v in views]
        one = ir.Constant(i64, 1)
        builder.call(fn, [ir.Constant(i32, 101), ir.Constant(i32, 112), k, n, ir.Constant(real, 1.0), data[1], n,
                          data[0], one, ir.Constant(real, 0.0), data[2], one])
        return context.get_dummy_value()

    return types.none(types.int64, a, b, c), codegen


def _csr_access(builder, name: str, pointer):
    fn = builder.module.globals.get(name)
    if fn is None:
        fn = ir.Function(builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()]), name=name)
    builder.call(fn, [builder.bitcast(pointer, ir.IntType(8).as_pointer())])


@intrinsic
def mxcsr(typingctx):
    """The calling thread's x86 MXCSR (its SSE rounding and denormal modes) as an int32."""
    def codegen(context, builder, signature, args):
        slot = builder.alloca(ir.IntType(32))
        _csr_access(builder, "llvm.x86.sse.stmxcsr", slot)
        return builder.load(slot)

    return types.int32(), codegen


@intrinsic
def set_mxcsr(typingctx, value):
    """Set the calling thread's x86 MXCSR to ``value`` (an int32 from :func:`mxcsr`)."""
    if value != types.int32:
        return None

    def codegen(context, builder, signature, args):
        slot = builder.alloca(ir.IntType(32))
        builder.store(args[0], slot)
        _csr_access(builder, "llvm.x86.sse.ldmxcsr", slot)
        return context.get_dummy_value()

    return types.none(types.int32), codegen


PAIRS_ENABLED = np.ones(1, np.int64)
"""``[1]`` while compiled loops may run paired products on two of numba's threads (:func:`gemm_pair`);
``[0]`` in a child process forked from this one: GNU OpenMP, numba's usual threading layer, aborts a forked
child that starts a parallel region once its parent has used it, so there each product is one call after
the other (the same bits)."""


def _no_pairs_after_fork() -> None:
    PAIRS_ENABLED[0] = 0


at_fork_in_child(_no_pairs_after_fork)


@numba.njit(parallel=True, nogil=True, cache=True)
def gemm_pair(address, a0, b0, c0, a1, b1, c1, csr):
    """``c0 = a0 @ b0`` and ``c1 = a1 @ b1`` (:func:`cblas_gemm`) at once on two of numba's threads, each
    inside the caller's MXCSR ``csr`` (its denormal mode: a worker thread's own may differ), so each
    product has the bits of the same call on the caller's thread."""
    for task in numba.prange(2):
        saved = mxcsr()
        set_mxcsr(csr)
        if task == 0:
            cblas_gemm(address, a0, b0, c0)
        else:
            cblas_gemm(address, a1, b1, c1)
        set_mxcsr(saved)


GEMM_CALL_FIELDS = ("order", "trans_a", "trans_b", "m", "n", "k", "a", "lda", "b", "ldb", "c", "ldc")
"""The columns of a row of :func:`gemm_calls`' ``calls``: a CBLAS gemm's arguments but alpha (1) and beta
(0), the matrices as addresses."""


@intrinsic
def gemm_call(typingctx, address, is_f64, row, a_base, b_base, c_base):
    """One CBLAS gemm through the ILP64 function at ``address`` (:func:`lowering.runtime.blas.numpy_gemm_address`):
    f64 when ``is_f64`` is non-zero, else f32, with the arguments in the int64 array ``row``
    (:data:`GEMM_CALL_FIELDS`; its matrix fields are offsets in bytes from ``a_base``, ``b_base`` and
    ``c_base``), alpha 1 and beta 0. The caller keeps the matrices alive."""
    if not (address == types.int64 and is_f64 == types.int64 and isinstance(row, types.Array)
            and row.dtype == types.int64 and row.ndim == 1
            and all(base in (types.uint64, types.int64) for base in (a_base, b_base, c_base))):
        return None
    i32, i64 = ir.IntType(32), ir.IntType(64)

    def codegen(context, builder, signature, args):
        address, is_f64, row, a_base, b_base, c_base = args
        view = context.make_array(signature.args[2])(context, builder, row)
        stride = cgutils.unpack_tuple(builder, view.strides, 1)[0]
        base = builder.ptrtoint(view.data, i64)

        def field(name):
            offset = builder.mul(stride, ir.Constant(i64, GEMM_CALL_FIELDS.index(name)))
            return builder.load(builder.inttoptr(builder.add(base, offset), i64.as_pointer()))

        values = {name: field(name) for name in GEMM_CALL_FIELDS}
        for name, base in (("a", a_base), ("b", b_base), ("c", c_base)):
            values[name] = builder.add(values[name], base)
        with builder.if_else(builder.icmp_signed("!=", is_f64, ir.Constant(i64, 0))) as (f64_branch, f32_branch):
            for branch, real in ((f64_branch, ir.DoubleType()), (f32_branch, ir.FloatType())):
                with branch:
                    fn, ptr = _gemm_function(builder, address, real)
                    builder.call(fn, [builder.trunc(values["order"], i32), builder.trunc(values["trans_a"], i32),
                                      builder.trunc(values["trans_b"], i32), values["m"], values["n"], values["k"],
                                      ir.Constant(real, 1.0), builder.inttoptr(values["a"], ptr), values["lda"],
                                      builder.inttoptr(values["b"], ptr), values["ldb"], ir.Constant(real, 0.0),
                                      builder.inttoptr(values["c"], ptr), values["ldc"]])
        return context.get_dummy_value()

    return types.none(types.int64, types.int64, row, a_base, b_base, c_base), codegen


@numba.njit(parallel=True, nogil=True, cache=True)
def gemm_calls(address, is_f64, a, b, c, calls, starts):
    """The gemm calls of ``calls`` (rows of :data:`GEMM_CALL_FIELDS`, matrices as byte offsets into the arrays
    ``a``, ``b`` and ``c``) on numba's threads: piece ``p`` (rows ``starts[p]`` to ``starts[p + 1]``, one
    after the other) on one thread, the pieces at once, each inside the caller's MXCSR (its denormal
    mode), so every call has the bits of the same call made on the caller's thread
    (:func:`lowering.runtime.blas.split_matmul`)."""
    a_base, b_base, c_base = a.ctypes.data, b.ctypes.data, c.ctypes.data
    csr = mxcsr()  # (outside the parallel loop: read on the calling thread)
    for piece in numba.prange(starts.size - 1):
        saved = mxcsr()
        set_mxcsr(csr)
        for i in range(starts[piece], starts[piece + 1]):
            gemm_call(address, is_f64, calls[i], a_base, b_base, c_base)
        set_mxcsr(saved)


@numba.njit(nogil=True, cache=True)
def current_mxcsr():
    """The calling thread's MXCSR (:func:`mxcsr`), read from Python."""
    return mxcsr()


@intrinsic
def cblas_gemm_columns(typingctx, address, a, b, c, start, stop):
    """``c[:, start:stop] = a @ b[:, start:stop]`` for C-ordered 2-d f32 or f64 arrays: the CBLAS gemm call
    NumPy's matmul makes for ``np.matmul(a, b[:, start:stop], out=c[:, start:stop])`` (row-major, no
    transposes, the column views' leading dimensions the full row lengths), through the function at
    ``address`` (:func:`cblas_gemm`)."""
    if not (start == types.int64 and stop == types.int64):
        return None
    return _matrix_gemm(address, a, b, c, columns=True)


@numba.njit(parallel=True, nogil=True, cache=True)
def gemm_pair_balanced(address, a0, b0, c0, a1, b1, c1, cut, csr):
    """``c0 = a0 @ b0`` and ``c1 = a1 @ b1`` at once on two of numba's threads, the larger second product's
    columns from ``cut`` on one thread, the first product and its columns up to ``cut`` on the other (where
    those column pieces give the whole product's bits: :func:`lowering.executor.compiled_loops.balanced_cut`); each
    inside the caller's MXCSR ``csr``."""
    for task in numba.prange(2):
        saved = mxcsr()
        set_mxcsr(csr)
        if task == 0:
            cblas_gemm(address, a0, b0, c0)
            cblas_gemm_columns(address, a1, b1, c1, 0, cut)
        else:
            cblas_gemm_columns(address, a1, b1, c1, cut, b1.shape[1])
        set_mxcsr(saved)


@intrinsic
def call_compiled(typingctx, address, a, b, c, d):
    """Call the numba-compiled function whose native entry point is at the int64 ``address``
    (:func:`native_address`) with ``(a, b, c, d)`` -- exactly the types it was compiled for -- and nothing returned;
    an exception it raises propagates. Why: a jitted caller that calls a jitted function directly links a copy of
    the callee's whole code into its own module, which LLVM optimizes and compiles again (small_dot's parallel
    pieces took 36 s per element type on a cold cache, small_dot itself 41 s); called at an address, the callee is
    compiled once, and its address is an argument, so a cached caller never holds a stale one."""
    arrays = (a, b, c)
    if address != types.int64 or not all(isinstance(x, types.Array) and x.layout == "C" for x in arrays):
        return None
    argument_types = (a, b, c, d)

    def codegen(context, builder, signature, args):
        from numba.core.callconv import excinfo_t

        call_conv = context.call_conv
        function_type = call_conv.get_function_type(types.none, argument_types)
        function = builder.inttoptr(args[0], function_type.as_pointer())
        result_type = call_conv.get_return_type(types.none).pointee
        result = cgutils.alloca_once(builder, result_type)
        builder.store(cgutils.get_null_value(result_type), result)
        excinfo = cgutils.alloca_once(builder, ir.PointerType(excinfo_t), name="excinfo")
        packed = list(call_conv._get_arg_packer(argument_types).as_arguments(builder, args[1:]))
        code = builder.call(function, [result, excinfo, *packed])
        status = call_conv._get_return_status(builder, code, builder.load(excinfo))
        with cgutils.if_unlikely(builder, status.is_error):
            call_conv.return_status_propagate(builder, status)
        return context.get_dummy_value()

    return types.none(types.int64, a, b, c, d), codegen


def native_address(dispatcher, *args) -> int:
    """The address of ``dispatcher``'s native entry point (numba's calling convention) for the numba types of
    ``args`` (compiled, or loaded from numba's cache, first): what :func:`call_compiled` calls. Kept per
    dispatcher and kind of arguments (numba's typing and lookup took 40 us a call; this is about 2)."""
    key = (dispatcher, *(_argument_kind(x) for x in args))
    address = _NATIVE_ADDRESSES.get(key)
    if address is None:
        signature = tuple(numba.typeof(x) for x in args)
        if signature not in dispatcher.overloads:
            dispatcher.compile(signature)
        result = dispatcher.overloads[signature]
        address = _NATIVE_ADDRESSES[key] = int(result.library.get_pointer_to_function(result.fndesc.llvm_func_name))
    return address


def _argument_kind(x) -> tuple:
    """What decides the numba type of an argument: an array's element type, rank, layout, writability and
    alignment; a scalar's Python type."""
    if isinstance(x, np.ndarray):
        flags = x.flags
        return x.dtype, x.ndim, flags.c_contiguous, flags.f_contiguous, flags.writeable, flags.aligned
    return (type(x),)


_NATIVE_ADDRESSES: dict = {}
"""(dispatcher, argument kinds...) -> :func:`native_address`'s address in this process (a forked child shares the
parent's code, so its addresses too)."""


@numba.njit(parallel=True, cache=True)
def parallel_probe(x):
    """A trivial parallel loop: running it starts numba's threading layer (to learn which one it is)."""
    for i in numba.prange(x.size):
        x[i] = i


# ----------------------------------------------------------------------------
# Generated code's allocations and copies, through cached functions
# ----------------------------------------------------------------------------
# numba compiles its own implementations of ``np.empty`` and ``np.ascontiguousarray`` in every process that uses
# them (they are not in its on-disk cache); generated code calls these functions instead, whose machine code numba
# caches once per installation, inlined by LLVM where they are called. (Array-to-slice assignments stay numba's own
# setitem: through a cached function taking the destination as a view, odeint's steady call took 0.156 ms instead
# of 0.086, inlined or not. Each new process compiles numba's shape-mismatch message for them instead: ~1-4 s of a
# new program's first compilation.)

@numba.njit(cache=True, nogil=True, error_model="numpy", forceinline=True)
def new_array(shape, dtype):
    """``np.empty(shape, dtype)``."""
    return np.empty(shape, dtype)


@numba.njit(cache=True, nogil=True, error_model="numpy", forceinline=True)
def contiguous(array):
    """``np.ascontiguousarray(array)``."""
    return np.ascontiguousarray(array)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def transposed(array, permutation):
    """``np.ascontiguousarray(np.transpose(array, permutation))``: numba's transpose compiled once per
    installation (per element type and rank) instead of once per process (2-6 s of the first program a process
    compiles that transposes, with numba's shape-error messages)."""
    return np.ascontiguousarray(np.transpose(array, permutation))


# ----------------------------------------------------------------------------
# Kernel calls without numba's status branch
# ----------------------------------------------------------------------------
# numba follows every call of a compiled function with a branch that returns its error status. The branch ends the
# basic block, and numba's reference-count pruner (llvmlite's refprune pass) removes an incref/decref pair only
# within one block or across a diamond without other decrefs: each array view that lives across a kernel call in a
# loop body (the kernel's operands, made by c_view) keeps an atomic incref and decref, about 5 ns each on this
# VM's CPU, and the kernel increments and decrements its operands' counts again on entry and exit. odeint's solve
# called a 1x7x2 dot kernel 9 times per step, ~190 atomic operations per step (gdb, breakpoints on NRT_incref and
# NRT_decref): 60% of its 0.20 ms steady call (perf). With the calls below and unowned operands (_unowned):
# 0.145 ms without the latter, 0.122 ms with both (python benchmarks/bench_real_programs.py, idle 2-core VM; jax.jit
# 0.056). A kernel called this way records a failure (numba's MemoryError of a scratch array is the only error a
# kernel compiled with ``error_model="numpy"`` and no bounds checks raises) in a flag the generated function checks
# after its inner loops' polls and before it returns (:func:`check_kernels`).


@intrinsic
def call_kernel(typingctx, failed, kernel, *args):
    """``kernel(*args)`` for a numba-compiled ``kernel`` (a dispatcher), without a branch on its status: a
    failure sets ``failed[0]`` to 1 (a one-element int64 array) and the code after the call runs on; the caller
    raises it with :func:`check_kernels`. The kernel's result is returned (None for the kernels that write
    ``out``)."""
    if not (isinstance(failed, types.Array) and failed.dtype == types.int64 and isinstance(kernel, types.Dispatcher)):
        return None
    signature = typingctx.resolve_function_type(kernel, args, {})
    if signature is None or _holds_arrays(signature.return_type):
        return None  # (a returned array could be an operand's view: see _unowned)
    compiled = kernel.dispatcher.get_compile_result(signature)

    def codegen(context, builder, sig, llargs):
        from numba.np.arrayobj import make_array

        context.add_linking_libs([compiled.library])
        values = [_unowned(context, builder, context.cast(builder, v, t, want), want) for v, t, want in
                  zip(cgutils.unpack_tuple(builder, llargs[2]), sig.args[2].types, compiled.signature.args)]
        # (parameters left to their defaults: numba's omitted-argument values)
        values += [context.get_constant_generic(builder, want, want.value)
                   for want in compiled.signature.args[len(values):]]
        status, result = context.call_internal_no_propagate(builder, compiled.fndesc, compiled.signature, values)
        flag = make_array(sig.args[0])(context, builder, llargs[0]).data
        old = builder.load(flag)
        builder.store(builder.or_(old, builder.zext(status.is_error, old.type)), flag)
        return context.cast(builder, result, compiled.signature.return_type, sig.return_type)

    return compiled.signature.return_type(failed, kernel, types.StarArgTuple.from_types(args)), codegen


def _holds_arrays(numba_type) -> bool:
    return isinstance(numba_type, types.Array) or (isinstance(numba_type, types.BaseTuple)
                                                   and any(_holds_arrays(t) for t in numba_type.types))


def _unowned(context, builder, value, numba_type):
    """Array operand ``value`` of a kernel call as a view without an owner (a null meminfo and parent): the
    caller's own reference keeps the memory alive for the call, and the kernel's reference counting of it and of
    its views (an atomic increment and decrement of each operand on entry and exit, more for views it makes) becomes
    a test of the null pointer. (A kernel called this way returns no array: :func:`call_kernel`.)"""
    if not isinstance(numba_type, types.Array):
        return value
    array = cgutils.create_struct_proxy(numba_type)(context, builder, value=value)
    array.meminfo = ir.Constant(array.meminfo.type, None)
    array.parent = ir.Constant(array.parent.type, None)
    return array._getvalue()


@numba.njit(cache=True, nogil=True)
def check_kernels(failed):
    """Raise the failure :func:`call_kernel` recorded in ``failed``."""
    if failed[0]:
        raise MemoryError("a kernel of the compiled code could not allocate its scratch memory")


# ----------------------------------------------------------------------------
# Ctrl-C and deadlines inside compiled loops
# ----------------------------------------------------------------------------

def _poll_python() -> None:
    from .interrupt import poll

    poll()


@numba.njit(cache=True, nogil=True)
def poll_interrupts():
    """Called by compiled loops every 65,536 iterations: Python checks for Ctrl-C and the call's deadline
    (:func:`lowering.runtime.interrupt.poll`, in numba's ``objmode``, which takes the GIL for that moment; an exception
    raised there leaves the compiled code, :func:`lowering.executor.compiled_loops.call_compiled`). One cached function:
    an ``objmode`` block in generated code cost ~2 s of compile time per program (numba cuts the function
    around it)."""
    with numba.objmode():
        _poll_python()


HELPER_NAMES = ("fused_multiply_add", "float_from_bits", "c_view", "packed_array", "borrowed_array", "owned",
                "unowned_view", "keep_alive",
                "cblas_gemm", "cblas_gemv", "cblas_gemm_columns", "gemm_pair", "gemm_pair_balanced", "mxcsr",
                "set_mxcsr", "new_array", "contiguous", "transposed", "poll_interrupts", "call_kernel", "check_kernels")
"""What a generated loop module imports from here."""
