"""Probes: every intermediate value of a run, by op, with the op's mnemonic and source location.

:func:`trace` compiles the program with a probe (``lowering.compile(probe=...)``): the executor then calls
the probe after each op of the function bodies and of while/conditional regions (every iteration), with the
values the op's own kernel computed; fusion and loop compilation are off so that every op runs on its own.
Nothing here computes a value: a probe only copies what the kernels returned.

Ops are identified by their position in the walk of the program given (:attr:`TracedValue.index`), kept
through the executor's pipeline as an attribute, so that two runs of one program (another dtype, other
compile options) can be matched op by op (:mod:`interop.debugging.divergence`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.ir import Operation

from xla_dialect.errors import XlaError
from xla_dialect.ops.control_flow import CallOp

__all__ = ["OP_INDEX", "Probe", "Trace", "TracedValue", "load_program_like", "program_and_arguments", "tag_ops",
           "trace"]

OP_INDEX = "debug.op"
"""The attribute holding an op's position in the walk of the program given to :func:`trace`."""

DEFAULT_MAX_ITERATIONS = 16
"""Values recorded per op inside loops: the first this many iterations (``max_iterations``)."""


def location_of(op: Operation) -> str | None:
    """``file:line`` of ``op`` as the importers keep it (JAX's ``loc``, HLO metadata), or None."""
    loc = op.attributes.get("loc")
    return None if loc is None else getattr(loc, "data", str(loc))


def tag_ops(module: ModuleOp) -> tuple[ModuleOp, list[Operation]]:
    """A copy of ``module`` whose ops carry :data:`OP_INDEX` (their position in the walk), and the ops of the
    copy by index. ``func.func`` ops are not numbered (they compute nothing)."""
    tagged = module.clone()
    body = [op for op in tagged.walk() if not isinstance(op, (ModuleOp, func.FuncOp))]
    if any(OP_INDEX in op.attributes for op in body):
        # numbered already (a copy made from a numbered program, such as the float64 shadow, whose added
        # converts have no number): the numbers stay, so that the two runs match
        ops: list = []
        for op in body:
            index = op_index(op)
            if index is not None:
                ops.extend([None] * (index + 1 - len(ops)))
                ops[index] = ops[index] or op
        return tagged, ops
    for index, op in enumerate(body):
        op.attributes[OP_INDEX] = IntegerAttr(index, i64)
    return tagged, body


def op_index(op: Operation) -> int | None:
    """The :data:`OP_INDEX` of ``op``, or None for an op the executor's pipeline made."""
    attr = op.attributes.get(OP_INDEX)
    return None if attr is None else int(attr.value.data)


def _through_calls(op: Operation, result: int) -> tuple[int | None, int]:
    """``(index, result)`` of the op computing result ``result`` of ``op``: for an ``hlo.call`` (inlined by the
    executor), the op of the callee that computes the value it returns there."""
    for _ in range(64):  # (calls nest; recursion is not allowed in XLA programs)
        if not isinstance(op, CallOp):
            break
        module = op
        while module.parent_op() is not None:
            module = module.parent_op()
        name = op.callee.string_value()
        callee = next((f for f in module.walk() if isinstance(f, func.FuncOp) and f.sym_name.data == name), None)
        if callee is None:
            break
        value = callee.body.block.last_op.operands[result]
        owner = value.owner
        if not isinstance(owner, Operation) or op_index(owner) is None:
            break
        op, result = owner, value.index
    return op_index(op), result


@dataclass
class TracedValue:
    """One value of a run: result ``result`` of op ``op`` (its mnemonic) at iteration ``iteration``."""

    key: str
    """``op12.hlo.subtract`` (``.r1`` for the second result, ``.it3`` for the fourth run inside a loop): unique
    in a trace, the array's name in ``--dump-intermediates`` files and the key of ``against=`` mappings."""
    index: int | None
    """Position of the op in the walk of the program given (None: an op the executor's pipeline added)."""
    op: str
    """The op's mnemonic as given (``hlo.subtract``)."""
    location: str | None
    """``file:line`` where known."""
    iteration: int
    """How many times this op had run before in this call (0 outside loops)."""
    result: int
    value: np.ndarray
    function: str = "main"
    executed_op: str = ""
    """The mnemonic of the op that computed it, when the executor's pipeline rewrote the op given
    (``hlo_internal.fma`` for an add that XLA contracts)."""
    device: int = 0
    """The device that computed it (``replica * num_partitions + partition``; 0 on one device)."""

    @property
    def shape(self) -> tuple[int, ...]:
        """The value's shape."""
        return tuple(np.shape(self.value))

    @property
    def dtype(self) -> str:
        """The value's dtype name."""
        return str(np.asarray(self.value).dtype)

    def as_dict(self) -> dict:
        """Everything but the value, as JSON (the index file of ``--dump-intermediates``)."""
        return {"key": self.key, "index": self.index, "op": self.op, "executed_op": self.executed_op or self.op,
                "location": self.location, "iteration": self.iteration, "result": self.result,
                "function": self.function, "device": self.device, "shape": list(self.shape), "dtype": self.dtype}


class Probe:
    """The recorder handed to ``lowering.compile(probe=...)``: :meth:`register` numbers the ops when the
    program is lowered, :meth:`record` copies their values at run time (the first ``max_iterations`` values
    of each op inside loops; None: all) into :attr:`values`; :meth:`reset` before a call forgets them.

    Used directly (``probe = Probe(); exe = lowering.compile(module, probe=probe); exe(x); probe.values``),
    values are keyed by the order in which the executor lowered the ops; :func:`trace` numbers the ops of
    the program given first, so that keys match between runs."""

    def __init__(self, originals: list[Operation] | None = None, max_iterations: int | None = DEFAULT_MAX_ITERATIONS):
        if max_iterations is not None and (isinstance(max_iterations, bool) or not isinstance(max_iterations, int)
                                           or max_iterations < 1):
            raise XlaError(f"trace: max_iterations must be a positive int or None, got {max_iterations!r}")
        self.max_iterations = max_iterations
        self.originals = originals or []
        self.sites: list[tuple] = []  # index, op, loc, function, executed op, number of its first result
        self.values: list[TracedValue] = []
        self.counts: dict[tuple[int, int], int] = {}
        self.skipped = 0
        self.devices = 1  # set by trace: with more, keys say which device computed the value (".dev3")
        from lowering.runtime.devices import current_device

        self._device = current_device

    def _index(self, op: Operation) -> tuple[int | None, int]:
        """The index of the op given that ``op`` computes, and the number of its first result there."""
        index = op_index(op)
        if index is not None or not op.results or not self.originals:
            return index, 0
        # An op the pipeline made in place of one given (an FMA for an add): its result replaced that op's
        # result, so a user that kept its index reads it at the operand position where the original one did.
        r = op.results[0]
        for use in r.uses:
            user = op_index(use.operation)
            if user is None or user >= len(self.originals) or self.originals[user] is None:
                continue
            original = self.originals[user].operands[use.index] if use.index < len(
                self.originals[user].operands) else None
            owner = getattr(original, "owner", None)
            if isinstance(owner, Operation) and original.type == r.type and op_index(owner) is not None:
                index, result = _through_calls(owner, original.index)
                # (only for an op that is gone: one still there, registered before its users, keeps its key)
                if index is not None and all(site[0] != index for site in self.sites):
                    return index, result
        return None, 0

    def register(self, op: Operation) -> int:
        """Number ``op`` (an op of the program being lowered); the number is ``record``'s first argument."""
        index, offset = self._index(op)
        original = self.originals[index] if index is not None and index < len(self.originals) else None
        given = original.name if original is not None else op.name
        # the function the op was written in (the executor inlines calls: a callee's ops run inside @main)
        fn = (original if original is not None else op).parent_op()
        while fn is not None and not isinstance(fn, func.FuncOp):
            fn = fn.parent_op()
        self.sites.append((index, given, location_of(op) or (location_of(original) if original is not None else None),
                           fn.sym_name.data if fn is not None else "main", op.name, offset))
        return len(self.sites) - 1

    def reset(self) -> None:
        """Forget the values recorded (before a call)."""
        self.values, self.counts, self.skipped = [], {}, 0

    def record(self, site: int, *results) -> None:
        """Copy the values of op ``site`` (called by the generated code after the op ran)."""
        state = self._device()  # (each device of a multi-device run calls from a thread of its own)
        device = 0 if state is None else state.device
        iteration = self.counts.get((site, device), 0)
        self.counts[(site, device)] = iteration + 1
        if self.max_iterations is not None and iteration >= self.max_iterations:
            self.skipped += 1
            return
        index, name, loc, fn, executed, offset = self.sites[site]
        # (a program not numbered by tag_ops: its ops are named by their order of lowering)
        base = f"op{index}" if index is not None else (f"new{site}" if self.originals else f"op{site}")
        for r, value in enumerate(results, offset):
            if not isinstance(value, (np.ndarray, np.generic)):
                continue  # tokens
            key = base + "." + name + (f".r{r}" if len(results) > 1 or offset else "") + (
                f".it{iteration}" if iteration else "") + (f".dev{device}" if self.devices > 1 else "")
            self.values.append(TracedValue(key, index, name, loc, iteration, r, np.array(value, copy=True), fn,
                                           executed if executed != name else "", device))


@dataclass
class Trace:
    """The values of one run (:func:`trace`), in the order they were computed."""

    values: list[TracedValue]
    outputs: tuple
    inputs: list
    skipped: int = 0
    """Values not recorded past ``max_iterations`` (inside loops)."""
    module: ModuleOp | None = field(default=None, repr=False)
    """The program as traced (its ops carry :data:`OP_INDEX`)."""

    def __iter__(self) -> Iterator[TracedValue]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, key) -> TracedValue:
        """By position, or by :attr:`TracedValue.key`."""
        if isinstance(key, str):
            for v in self.values:
                if v.key == key:
                    return v
            raise KeyError(key)
        return self.values[key]

    def of(self, op: str) -> list[TracedValue]:
        """The values of the ops with mnemonic ``op`` (``"hlo.subtract"`` or ``"subtract"``)."""
        name = op if "." in op else "hlo." + op
        return [v for v in self.values if v.op == name]

    def as_dict(self) -> dict[str, np.ndarray]:
        """Key -> value (the arrays of ``--dump-intermediates``)."""
        return {v.key: v.value for v in self.values}

    def __str__(self) -> str:
        lines = [f"{len(self.values)} values" + (f" ({self.skipped} more inside loops not recorded)"
                                                if self.skipped else "")]
        for v in self.values:
            a = np.asarray(v.value)
            summary = ""
            if a.size and (a.dtype.kind in "biuf" or a.dtype.kind == "V"):
                try:
                    w = a.astype(np.float64)
                    summary = f" min {np.nanmin(w):.6g} max {np.nanmax(w):.6g}" if not np.all(np.isnan(w)) else ""
                    nans = int(np.isnan(w).sum())
                    summary += f" nan {nans}" if nans else ""
                except (TypeError, ValueError):
                    pass
            lines.append(f"  {v.key:32s} {v.dtype}{list(a.shape)}  {v.location or '-'}{summary}")
        return "\n".join(lines)

    def dump(self, directory: str) -> list[str]:
        """Write one ``FUNCTION.npz`` per function (arrays named by key) and ``index.json`` (every value's
        op, location, iteration, shape and dtype, in the order computed, and the file it is in) to
        ``directory`` (created if needed); returns the paths written. NumPy stores ml_dtypes arrays (bf16, f8)
        as raw bytes (``np.load`` gives ``|V2``): read them back with ``.view(ml_dtypes.bfloat16)``, the dtype
        being in the index (``find_divergence`` does so by itself)."""
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise XlaError(f"--dump-intermediates {directory}: {e.strerror or e}") from None
        by_function: dict[str, dict[str, np.ndarray]] = {}
        index = []
        for v in self.values:
            by_function.setdefault(v.function, {})[v.key] = v.value
            index.append({**v.as_dict(), "file": f"{v.function}.npz"})
        written = []
        for fn, arrays in by_function.items():
            path = os.path.join(directory, f"{fn}.npz")
            np.savez(path, **arrays)
            written.append(path)
        path = os.path.join(directory, "index.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"values": index, "skipped": self.skipped}, f, indent=1)
            f.write("\n")
        written.append(path)
        return written


def load_program_like(program, args, what: str = "trace") -> ModuleOp:
    """``program`` as an xDSL module: a module as is, a program file path (:func:`interop.load_program`),
    or a JAX function / jitted function imported with ``args`` as examples (:func:`interop.import_jax`)."""
    if isinstance(program, ModuleOp):
        return program
    if isinstance(program, (str, os.PathLike)):
        from ..programs import load_program

        return load_program(os.fspath(program), list(args) or None)
    if callable(program) or hasattr(program, "lower"):
        from ..jax import import_jax

        return import_jax(program, *args)
    raise XlaError(f"{what} expects an xDSL module, a program file or a JAX function, got {type(program).__name__}")


def program_and_arguments(program, args, what: str = "trace") -> tuple[ModuleOp, list]:
    """``program`` as a module (:func:`load_program_like`) and ``args`` as it takes them: for a JAX function
    the leaves of the argument pytrees (typed PRNG keys as their key data), else ``args`` as given."""
    module = load_program_like(program, args, what)
    if module is program or isinstance(program, (str, os.PathLike)):
        return module, list(args)
    import jax

    from ..comparison import plain_array

    return module, [plain_array(leaf) for leaf in jax.tree_util.tree_leaves(args)]


def trace(program, *args, max_iterations: int | None = DEFAULT_MAX_ITERATIONS, entry: str = "main",
          device: str | None = None, **compile_options) -> Trace:
    """Run ``program`` on ``args`` and return every intermediate value, by op, in the order computed.

    ``program`` is an xDSL module, a program file or a JAX function (imported with ``args``, which may be
    pytrees: the program takes their leaves). Each
    :class:`TracedValue` has the op's mnemonic (``.op``), source location (``.location``, ``file:line`` from
    JAX's locations or HLO metadata), position in the program (``.index``), iteration and value. Ops inside
    ``while`` bodies and conditionals are recorded each time they run, the first ``max_iterations`` times
    (None: all). ``compile_options`` go to :func:`lowering.compile` (``xla_rewrites=False``,
    ``denormals="keep"``, ...); fusion and loop compilation are off while tracing, which does not change any
    value. The values are those the executor's kernels computed; :attr:`Trace.outputs` are the results.
    ``device`` (``"tpu"``, ``"gpu"``) computes f32 dots and convolutions as that device does for their
    precision (:func:`interop.debugging.device_numerics.emulate_device`).

    A program of several devices (``num_replicas`` / ``num_partitions`` in ``compile_options``) takes one
    argument list per device, as :func:`lowering.compile`'s multi-device executables do; each value then
    has the device that computed it (:attr:`TracedValue.device`, and ``.devN`` at the end of its key), and
    :attr:`Trace.outputs` has one result tuple per device.
    """
    import lowering

    module, args = program_and_arguments(program, args)
    tagged, originals = tag_ops(module)
    if device is not None:
        from .device_numerics import emulate_device

        tagged = emulate_device(tagged, device)
    probe = Probe(originals, max_iterations)
    for name in ("probe", "fusion", "loop_compilation"):
        if name in compile_options:
            raise XlaError(f"trace: {name} is set by trace itself")
    exe = lowering.compile(tagged, entry=entry, probe=probe, **compile_options)
    probe.devices = getattr(exe, "num_devices", 1)
    probe.reset()
    outputs = exe(*args)
    if probe.devices > 1:  # (the devices' threads append in any order: each device's values in its order)
        probe.values.sort(key=lambda v: v.device)
    return Trace(probe.values, outputs, list(args), probe.skipped, tagged)
