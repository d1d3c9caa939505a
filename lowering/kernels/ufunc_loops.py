"""NumPy ufuncs whose inner loop is one numba ``cfunc``, cached on disk whole.

The interpreter computes an element-wise op with the op's scalar definition (:mod:`.scalar`) applied by a NumPy
ufunc. ``numba.vectorize`` makes such a ufunc, but it caches only the element function: the loop around it is
generated and compiled by LLVM again in every process, 35-150 ms per ufunc (measured on a 2-core VM, 2026-12-04),
and betainc's ``lowering.compile`` and first call as a new process built eight of them -- half a second before
any result.

Here the whole inner loop -- NumPy's ``(char **args, npy_intp *dimensions, npy_intp *steps, void *data)`` --
is the numba ``cfunc`` of a generated module (:func:`loop_text`), which numba caches on disk like any function of
the library's generated code; :func:`ufunc_of_loop` makes a NumPy ufunc of its address (numba's own constructor of
ufuncs from loop addresses). A later process loads the machine code: 3-7 ms per ufunc. The modules are kept with
the library's own machine code (:func:`lowering.runtime.generated_modules.library_module_directory`), so each is
compiled once per installation. The loop calls the same scalar definition, converts the result to the result type
as ``numba.vectorize``'s loop does and uses numba's ``numpy`` error model (its default for ufuncs: no exception for
a division by zero), so the bits are those of the definition -- which the tests of every definition check against
XLA through the interpreter.

The loop has two forms, as ``numba.vectorize``'s has: every operand and the result contiguous (element sizes as
steps, which LLVM vectorizes) and any steps (broadcast operands have step 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

LOOP_SIGNATURE = types.void(types.CPointer(types.voidptr), types.CPointer(types.intp), types.CPointer(types.intp),
                            types.voidptr)
"""NumPy's inner-loop signature: argument pointers, the length (``dimensions[0]``), the steps in bytes, data."""


def _element_type(kind):
    """The numba type of the element type a loop passes as ``np.float32``, ``np.bool_``, ... (a type reference)."""
    if isinstance(kind, types.NumberClass):
        return kind.instance_type
    if isinstance(kind, types.Function) and kind.typing_key is np.bool_:  # (numba types np.bool_ as a function)
        return types.boolean
    if isinstance(kind, types.TypeRef):
        return kind.instance_type
    raise TypeError(f"lowering.kernels.ufunc_loops: not an element type: {kind}")


@intrinsic
def load(typingctx, pointer, offset, kind):
    """The element of type ``kind`` (``np.float32``, ...) at byte ``offset`` from ``pointer``."""
    element = _element_type(kind)

    def codegen(context, builder, signature, args):
        base, byte_offset, _ = args
        address = builder.gep(builder.bitcast(base, ir.IntType(8).as_pointer()), [byte_offset])
        return context.unpack_value(builder, element,
                                    builder.bitcast(address, context.get_data_type(element).as_pointer()))

    return element(pointer, offset, kind), codegen


@intrinsic
def store(typingctx, pointer, offset, value):
    """Store ``value`` at byte ``offset`` from ``pointer`` (in the type it has)."""

    def codegen(context, builder, signature, args):
        base, byte_offset, element = args
        address = builder.gep(builder.bitcast(base, ir.IntType(8).as_pointer()), [byte_offset])
        context.pack_value(builder, value, element,
                           builder.bitcast(address, context.get_data_type(value).as_pointer()))
        return context.get_dummy_value()

    return types.none(pointer, offset, value), codegen


def _type_name(dtype: np.dtype) -> str:
    """How the generated text names ``dtype``'s scalar type (``np.float32``, ``np.bool_``)."""
    name = np.dtype(dtype).type.__name__
    if getattr(np, name, None) is not np.dtype(dtype).type:
        raise TypeError(f"lowering.kernels.ufunc_loops: no NumPy name for {dtype}")
    return f"np.{name}"


def loop_text(call: str, operand_dtypes: Sequence[np.dtype], result_dtype: np.dtype, cached: bool) -> str:
    """The source of ``loop``, a numba cfunc with NumPy's inner-loop signature computing ``target(call)`` for each
    element, where ``call`` is an expression of the operands ``x0``, ``x1``, ... (the module defines ``target``,
    the result's scalar type, and every name ``call`` uses)."""
    operand_dtypes = [np.dtype(d) for d in operand_dtypes]
    result_dtype = np.dtype(result_dtype)
    count = len(operand_dtypes)
    lines = [f"@cfunc(LOOP_SIGNATURE, cache={cached}, error_model='numpy')",
             "def loop(args, dims, steps, data):",
             "    n = dims[0]"]
    lines += [f"    a{k} = args[{k}]" for k in range(count)] + [f"    out = args[{count}]"]
    lines += [f"    s{k} = steps[{k}]" for k in range(count)] + [f"    so = steps[{count}]"]

    def body(steps: list[str], out_step: str) -> list[str]:
        names = [f"x{k}" for k in range(count)]
        loads = [f"        {name} = load(a{k}, i * {step}, {_type_name(d)})"
                 for k, (name, step, d) in enumerate(zip(names, steps, operand_dtypes))]
        return ["    for i in range(n):", *loads, f"        store(out, i * {out_step}, target({call}))"]

    contiguous = " and ".join([f"s{k} == {d.itemsize}" for k, d in enumerate(operand_dtypes)]
                              + [f"so == {result_dtype.itemsize}"])
    lines.append(f"    if {contiguous}:")
    lines += ["    " + line for line in body([str(d.itemsize) for d in operand_dtypes], str(result_dtype.itemsize))]
    lines.append("    else:")
    lines += ["    " + line for line in body([f"s{k}" for k in range(count)], "so")]
    return "\n".join(lines) + "\n"


LOOP_IMPORTS = ("import numpy as np", "from numba import cfunc",
                "from lowering.kernels.ufunc_loops import LOOP_SIGNATURE, load, store")
"""The imports every loop module starts with."""


def ufunc_of_loop(name: str, loop, operand_dtypes: Sequence[np.dtype], result_dtype: np.dtype) -> np.ufunc:
    """A NumPy ufunc named ``name`` over ``operand_dtypes`` giving ``result_dtype`` whose inner loop is the cfunc
    ``loop`` (kept alive by the ufunc)."""
    from numba.np.ufunc import _internal

    type_numbers = [np.dtype(d).num for d in (*operand_dtypes, result_dtype)]
    return _internal.fromfunc(name, None, [loop.address], [type_numbers], len(operand_dtypes), 1, [None], [loop],
                              _internal.PyUFunc_None)
