"""Import JAX programs: functions, ``Lowered``, ``Exported``, serialized exports, StableHLO.

:func:`import_jax` accepts every form in which JAX hands out a program and
returns an hlo ``ModuleOp`` whose ``@main`` takes the flattened arguments (in
``jax.tree`` order, unused ones included) and returns the flattened outputs
(in ``jax.tree`` order). The StableHLO is read by
:mod:`interop.stablehlo`.
"""

from __future__ import annotations


from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, FunctionType, ModuleOp, TensorType

from xla_dialect.errors import UnsupportedError, XlaError
from xla_dialect.types import element_type_from_dtype

from ..stablehlo import import_mlir_module, import_stablehlo
from ..stablehlo.bytecode import MAGIC as _BYTECODE_MAGIC


__all__ = ["import_jax"]


def import_jax(obj, *example_args, trusted: bool | None = None, **example_kwargs) -> ModuleOp:
    """Import a JAX program into the hlo dialect.

    ``obj`` is one of:

    * a Python function, jitted or not: traced with ``example_args`` /
      ``example_kwargs`` (arrays, scalars or ``jax.ShapeDtypeStruct``); the program
      computes what the call returns, also for another library's jit wrapper such as
      ``flax.nnx.jit`` (:func:`jit_of_call`: the model's state leaves are parameters);
    * a ``jax.stages.Lowered`` (``jax.jit(f).lower(...)``) or ``jax.stages.Traced``;
    * a ``jax.export.Exported``, or the bytes of ``Exported.serialize()``;
    * a StableHLO portable artifact (``Exported.mlir_module_serialized``), MLIR
      bytecode, or StableHLO MLIR text (pretty or generic form);
    * a jaxlib ``ir.Module``.

    For a shape-polymorphic program (``Exported`` from
    ``jax.export.symbolic_shape`` specs, or StableHLO whose ``@main`` takes
    ``?`` dimensions) the example arguments give the concrete shapes the
    program is refined to; for a ``Lowered`` (already static) they are not
    accepted.

    Bytes (a serialized export, bytecode, an artifact) are untrusted input for jaxlib's C++ reader,
    which aborts the process on some corrupted bytes: they are first read in a child process (a fork: about
    0.1 s; :mod:`interop.stablehlo.bytecode_check`). ``trusted=True`` skips that for bytes you produced yourself
    (as ``import_stablehlo(data, trusted=True)``). Tracing a function reads no bytes: there a
    ``trusted=`` keyword is the function's own example argument.
    """
    import jax

    if trusted is not None and callable(obj) and not isinstance(
            obj, (jax.export.Exported, jax.stages.Lowered, jax.stages.Traced)):
        example_kwargs["trusted"] = trusted  # the traced function's keyword of that name
    trusted = bool(trusted)

    flat_examples = jax.tree.leaves((example_args, example_kwargs)) if (example_args or example_kwargs) else []
    if flat_examples and isinstance(obj, (jax.stages.Lowered, jax.stages.Traced)):
        raise XlaError(f"import_jax: a {type(obj).__name__} has static shapes already; example arguments are "
                       "only used to trace a function or refine a shape-polymorphic program")
    if isinstance(obj, str):
        return import_stablehlo(obj, *flat_examples)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return _from_bytes(bytes(obj), flat_examples, trusted)
    if isinstance(obj, jax.export.Exported):
        return _from_exported(obj, flat_examples, trusted=True)
    if isinstance(obj, jax.stages.Lowered):
        return _from_lowered(obj)
    if isinstance(obj, jax.stages.Traced):
        return _from_lowered(obj.lower())
    from jaxlib.mlir import ir

    if isinstance(obj, ir.Module):
        return import_mlir_module(obj, *flat_examples)
    if callable(obj):
        return _from_function(obj, example_args, example_kwargs)
    raise XlaError(
        f"import_jax: cannot import a {type(obj).__name__}; expected a function, jax.stages.Lowered, "
        "jax.export.Exported, serialized export bytes, a StableHLO artifact or StableHLO text"
    )


def jit_of_call(fn):
    """The ``jax.jit`` function whose program computes what calling ``fn`` returns: ``fn`` itself when jax
    jitted it (its options kept), else ``jax.jit(fn, keep_unused=True)``.

    Another library's jit wrapper (``flax.nnx.jit``) has ``lower``/``trace`` too, but lowers its own inner
    program: nnx's returns the updated state of the modules it was given first (a ``Linear``'s kernel and
    bias, then the result). Wrapped in ``jax.jit``, the nnx call is traced as a whole, as ``jax.jit`` of the
    call runs it: the program's parameters are the leaves of the arguments (a module's state, in
    ``jax.tree.leaves`` order, as any pytree), its results what the call returns; state updates the call
    makes (BatchNorm statistics, an RNG count) are not results, and tracing changes no module. Static
    arguments given to the wrapper as ``static_argnums`` stay static.
    """
    import jax

    if type(fn).__module__.split(".")[0] in ("jax", "jaxlib"):  # jax.jit, jax.pmap...: their own program
        return fn if hasattr(fn, "lower") and hasattr(fn, "trace") else jax.jit(fn, keep_unused=True)
    static = getattr(fn, "static_argnums", None) if hasattr(fn, "lower") else None
    if not (isinstance(static, int) or (isinstance(static, (tuple, list))
                                        and all(isinstance(i, int) for i in static))):
        static = None
    return jax.jit(fn, keep_unused=True, static_argnums=static)


def _from_function(fn, args, kwargs) -> ModuleOp:
    # Lowered for XLA's CPU backend whatever jax's default platform is (the executor reproduces XLA CPU):
    # jax.jit lowers some ops differently per platform.
    jitted = jit_of_call(fn)
    try:
        traced = jitted.trace(*args, **kwargs)  # already jitted: keeps its options
    except TypeError as e:
        raise XlaError(f"import_jax: tracing {getattr(fn, '__name__', fn)!r} failed: {e}") from None
    try:
        lowered = traced.lower(lowering_platforms=("cpu",))
    except TypeError:  # a jitted wrapper whose trace() does not take platforms (other libraries)
        lowered = jitted.lower(*args, **kwargs)
    return _from_lowered(lowered)


def _from_lowered(lowered) -> ModuleOp:
    import jax

    module = import_mlir_module(lowered.compiler_ir("stablehlo"))
    kept = None
    callbacks = ()
    ordered = ()
    try:
        compile_args = lowered._lowering.compile_args
        kept = compile_args.get("kept_var_idx")  # jit drops unused arguments
        callbacks = compile_args.get("host_callbacks") or ()
        ordered = compile_args.get("ordered_effects") or ()
    except AttributeError:
        pass
    _capture_host_callbacks(module, callbacks)
    _drop_effect_tokens(module, len(ordered))
    in_avals = jax.tree.leaves(lowered.in_avals)
    return _restore_unused_arguments(module, kept, in_avals)


def _capture_host_callbacks(module: ModuleOp, callbacks) -> None:
    """Put the Python callable behind each host-callback custom call (``jax.debug.print``,
    ``jax.pure_callback``, ``io_callback``, ``eqx.error_if``) on its op (:mod:`xla_dialect.callbacks`).

    The program holds only an ``index`` into the lowering's ``host_callbacks``: the module keeps the
    callables from here on, so the executable does not depend on jax's lowering staying alive."""
    from xla_dialect.callbacks import (
        HOST_CALLBACK_ATTR,
        HOST_CALLBACK_TARGETS,
        HostCallback,
        HostCallbackAttr,
        callback_index,
        describe_callback,
    )
    from xla_dialect.ops.effects import CustomCallOp

    callbacks = list(callbacks)
    if not callbacks:
        return
    for op in module.walk():
        if not isinstance(op, CustomCallOp) or op.properties["call_target_name"].data not in HOST_CALLBACK_TARGETS:
            continue
        index = callback_index(op)
        if index is None or not 0 <= index < len(callbacks) or not callable(callbacks[index]):
            continue  # left uncaptured: the executor says so if the call runs
        fn = callbacks[index]
        op.attributes[HOST_CALLBACK_ATTR] = HostCallbackAttr(HostCallback(describe_callback(fn), index, fn))


def _drop_effect_tokens(module: ModuleOp, count: int) -> None:
    """Make ``@main`` take and return what the jitted function does: jax threads one runtime token per
    ordered effect (``io_callback(..., ordered=True)``) through ``@main``'s leading arguments and results;
    here each token argument becomes an ``hlo.create_token`` and the token results are dropped (calls of an
    executable run one after the other, so effects stay in order across calls too)."""
    from xla_dialect.ops.effects import CreateTokenOp
    from xla_dialect.types import TokenType

    if count <= 0:
        return
    main = next((op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "main"), None)
    if main is None:
        return
    block = main.body.block
    outputs = list(main.function_type.outputs)
    ret = block.last_op
    if (len(block.args) < count or not all(isinstance(a.type, TokenType) for a in block.args[:count])
            or len(outputs) < count or not all(isinstance(t, TokenType) for t in outputs[:count])
            or not isinstance(ret, func.ReturnOp)):
        return  # not jax's calling convention: leave the signature alone
    for arg in list(block.args[:count]):
        token = CreateTokenOp.create(result_types=[arg.type])
        block.insert_op_before(token, block.first_op)
        arg.replace_all_uses_with(token.results[0])
        block.erase_arg(arg)
    ret.operands = list(ret.operands)[count:]
    main.function_type = FunctionType.from_lists([a.type for a in block.args], outputs[count:])
    if main.arg_attrs is not None:
        main.arg_attrs = ArrayAttr(list(main.arg_attrs.data)[count:])
    if main.res_attrs is not None:
        main.res_attrs = ArrayAttr(list(main.res_attrs.data)[count:])


def _from_exported(exported, flat_examples=(), trusted: bool = False) -> ModuleOp:
    platform_index = None
    if len(exported.platforms) > 1:
        # A multi-platform export takes the platform's index first: fix it to the CPU's.
        if "cpu" not in exported.platforms:
            raise UnsupportedError(f"the export is for {list(exported.platforms)}, not for the CPU")
        platform_index = exported.platforms.index("cpu")
        if flat_examples:
            import numpy as np

            flat_examples = [np.int32(platform_index), *flat_examples]
    kept = sorted(exported.module_kept_var_idx)
    in_avals = list(exported.in_avals)
    if flat_examples:
        if len(flat_examples) - (platform_index is not None) != len(in_avals):
            raise XlaError(f"import_jax: the export takes {len(in_avals)} flattened arguments, "
                           f"{len(flat_examples)} example arguments given")
        in_avals = [_example_aval(a) for a in flat_examples[1 if platform_index is not None else 0:]]
        offset = 1 if platform_index is not None else 0
        examples = flat_examples[:offset] + [flat_examples[offset + i] for i in kept]
        module = import_stablehlo(exported.mlir_module_serialized, *examples, trusted=trusted)
    else:
        module = import_stablehlo(exported.mlir_module_serialized, trusted=trusted)
    if platform_index is not None:
        _fix_platform_index(module, platform_index)
    return _restore_unused_arguments(module, kept, in_avals)


def _fix_platform_index(module: ModuleOp, index: int) -> None:
    """Replace ``@main``'s leading platform-index parameter by the constant ``index``."""
    import numpy as np

    from xla_dialect.literal import DenseLiteralAttr
    from xla_dialect.ops.constants import ConstantOp

    main = next(op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "main")
    block = main.body.block
    arg = block.args[0]
    constant = ConstantOp.create(
        properties={"value": DenseLiteralAttr.from_array(np.array(index, np.int32), arg.type)},
        result_types=[arg.type])
    block.insert_op_before(constant, block.first_op)
    arg.replace_all_uses_with(constant.results[0])
    block.erase_arg(arg)
    main.function_type = FunctionType.from_lists([a.type for a in block.args], list(main.function_type.outputs))
    if main.arg_attrs is not None:
        main.arg_attrs = ArrayAttr(list(main.arg_attrs.data)[1:])


def _example_aval(arg):
    import jax
    import numpy as np

    if hasattr(arg, "shape") and hasattr(arg, "dtype"):
        return jax.ShapeDtypeStruct(tuple(arg.shape), arg.dtype)
    arr = np.asarray(arg)
    return jax.ShapeDtypeStruct(arr.shape, arr.dtype)


def _from_bytes(data: bytes, flat_examples=(), trusted: bool = False) -> ModuleOp:
    if not data.strip():
        from xla_dialect.errors import empty_input

        raise XlaError("import_jax: " + empty_input("<bytes>", data))
    if data.startswith(_BYTECODE_MAGIC):
        return import_stablehlo(data, *flat_examples, trusted=trusted)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and ("func.func" in text or "module" in text):
        return import_stablehlo(text, *flat_examples)
    import jax

    try:
        exported = jax.export.deserialize(bytearray(data))
    except ImportError as e:
        raise UnsupportedError(f"reading serialized jax.export bytes needs the 'flatbuffers' package: {e}") from None
    except Exception as e:
        raise XlaError(
            "import_jax: the bytes are not a program: neither MLIR text, MLIR bytecode / a StableHLO portable "
            f"artifact (magic 'ML\\xefR') nor a serialized jax.export.Exported (jax.export.deserialize: {e})"
        ) from None
    return _from_exported(exported, flat_examples, trusted)


def _aval_type(aval):
    element = element_type_from_dtype(aval.dtype)
    try:
        shape = [int(d) for d in aval.shape]
    except TypeError:
        raise UnsupportedError(f"argument of symbolic shape {aval} needs example arguments to refine it") from None
    return TensorType(element.mlir, shape)


def _restore_unused_arguments(module: ModuleOp, kept, in_avals) -> ModuleOp:
    """Give ``@main`` back the arguments JAX dropped because they are unused.

    JAX compiles only the arguments a function uses (``kept_var_idx``); the
    imported program takes all flattened arguments, so that it is called like
    the JAX function.
    """
    if kept is None:
        return module
    kept = sorted(kept)
    if len(kept) == len(in_avals):
        return module
    main = next((op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "main"), None)
    if main is None or len(main.body.block.args) != len(kept):
        return module  # extra token/platform arguments: leave the signature alone
    block = main.body.block
    old_attrs = list(main.arg_attrs.data) if main.arg_attrs is not None else None
    new_attrs = []
    position = {k: i for i, k in enumerate(kept)}
    for index, aval in enumerate(in_avals):
        if index in position:
            if old_attrs is not None:
                new_attrs.append(old_attrs[position[index]])
            continue
        block.insert_arg(_aval_type(aval), index)
        new_attrs.append(DictionaryAttr({}))
    inputs = [a.type for a in block.args]
    main.function_type = FunctionType.from_lists(inputs, list(main.function_type.outputs))
    if old_attrs is not None:
        main.arg_attrs = ArrayAttr(new_attrs)
    return module
