"""Constants and per-call buffers of generated code: packed arguments, reads without reference counts.

A compiled segment or loop reads the program's constants -- scalars, one-element arrays, small tables -- as
arguments of its numba function, so that its source (and numba's cached machine code) depends on the program's
structure only. Each argument costs the call from Python 40-70 ns (numba's dispatcher types, fingerprints and
unboxes it, and an array gets a reference-counted wrapper): diffrax's Tsit5 solve passed 155 (59 int32 and 29 bool
scalars, 53 one-element arrays), 10 us of a 51 us call. :func:`pack_constants` rewrites the function to take them
in one array per element type -- scalars read by index, arrays as views at an offset
(:func:`lowering.runtime.loop_runtime.packed_array`) -- assigned to the same names in a prologue, so the rest of the
code is unchanged. Where every value the function returns can be passed through ``owned`` (a copy of a view
without an owner), the arrays are such views (:func:`~lowering.runtime.loop_runtime.borrowed_array`): the
function's argument keeps their memory alive, and numba's reference counting of them -- atomic operations each
time a constant is bound to another name, 15 in the Tsit5 solve's stage loop -- becomes a null test. An array
whose object identity matters (the runtime changes it after the code is compiled: :func:`_shared`) and element
types the packing does not cover stay arguments of their own. :func:`unowned_buffers` does the same for the
buffers a function allocates once per call.
"""

from __future__ import annotations

import re

import numpy as np

PACKED_DTYPES = tuple(np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                            np.uint32, np.uint64, np.float32, np.float64))
"""Element types packed (others, such as f16 and complex, stay arguments of their own)."""

ALIGNMENT = 64
"""Each packed array starts at a multiple of this many bytes from its buffer's start."""


def _shared() -> tuple[int, ...]:
    """The ids of the arrays passed as they are: ``PAIRS_ENABLED``, which a forked child clears."""
    from ..runtime.loop_runtime import PAIRS_ENABLED

    return (id(PAIRS_ENABLED),)


def _scalar_dtype(value) -> np.dtype | None:
    """The element type a scalar constant is packed as (numba types the argument the same), or None."""
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(np.bool_)
    if isinstance(value, np.generic):
        return value.dtype if value.dtype in PACKED_DTYPES else None
    if isinstance(value, int):
        return np.dtype(np.int64) if -2 ** 63 <= value < 2 ** 63 else None
    if isinstance(value, float):
        return np.dtype(np.float64)
    return None


def pack_constants(source: str, function: str, names: list[str], values: list) -> tuple[str, list]:
    """``source`` with function ``function`` (whose parameters start with the constant ``names``, in order) taking
    its packable constants in packed arrays, and the arguments to pass in their place (in order: the packed
    arrays, then the constants left unpacked). Deterministic in the constants' names, types and shapes, not their
    values: programs that differ in constants only share the module."""
    header = f"def {function}("
    start = source.find(header)
    if start < 0 or (start and source[start - 1] != "\n"):
        raise ValueError(f"pack_constants: no top-level function {function!r} in the source")
    end = source.index("):\n", start)
    parameters = [p.strip() for p in source[start + len(header):end].split(",") if p.strip()]
    if parameters[:len(names)] != list(names):
        raise ValueError(f"pack_constants: {function}'s parameters do not start with the constants")
    shared = _shared()
    scalars: dict[np.dtype, list] = {}
    arrays: dict[np.dtype, list] = {}
    sizes: dict[np.dtype, int] = {}
    prologue: list[str] = []
    kept_names: list[str] = []
    kept_values: list = []
    for name, value in zip(names, values):
        dtype = _scalar_dtype(value)
        if dtype is not None:
            column = scalars.setdefault(dtype, [])
            prologue.append(f"    {name} = _ks_{dtype.name}[{len(column)}]")
            column.append(value)
            continue
        if (isinstance(value, np.ndarray) and value.ndim >= 1 and value.dtype in PACKED_DTYPES
                and id(value) not in shared):
            step = max(ALIGNMENT // value.dtype.itemsize, 1)
            offset = -(-sizes.get(value.dtype, 0) // step) * step
            arrays.setdefault(value.dtype, []).append((offset, value))
            sizes[value.dtype] = offset + value.size
            prologue.append(f"    {name} = packed_array(_ka_{value.dtype.name}, {offset}, {tuple(value.shape)!r})")
            continue
        kept_names.append(name)
        kept_values.append(value)
    if not prologue:
        return source, list(values)
    buffers: list[str] = []
    packed: list = []
    for dtype, column in scalars.items():
        buffers.append(f"_ks_{dtype.name}")
        packed.append(np.array(column, dtype))
    for dtype, members in arrays.items():
        buffers.append(f"_ka_{dtype.name}")
        buffer = np.zeros(sizes[dtype], dtype)
        for offset, value in members:
            buffer[offset:offset + value.size] = value.reshape(-1)
        packed.append(buffer)
    signature = ", ".join([*buffers, *kept_names, *parameters[len(names):]])
    body = source.index("\n", end) + 1
    following = re.search(r"^\S", source[body:], re.MULTILINE)  # (the next top-level statement, if any)
    stop = body + following.start() if following else len(source)
    rest = source[body:stop]
    guarded = _returning_owned(rest.split("\n"))
    if guarded is not None:  # (views without an owner: their reference counts are null tests, not atomic operations)
        prologue = [line.replace("= packed_array(", "= borrowed_array(", 1) for line in prologue]
        rest = "\n".join(guarded)
    text = source[:start] + f"{header}{signature}):\n" + "\n".join(prologue) + "\n" + rest + source[stop:]
    return text, [*packed, *kept_values]


def _returning_owned(lines: list[str], before: str | None = None) -> list[str] | None:
    """A function's ``lines`` with every value it returns passed through ``owned`` (a view without an owner is
    copied before it leaves) and ``before``, if given, put after those copies and before the return; None when a
    return is not a tuple of names, or there is none.

    With ``before`` (the :func:`~lowering.runtime.loop_runtime.keep_alive` of a function's buffers), the copies are
    made first, into names of their own: numba releases a variable after its last use, so buffers kept alive by a
    ``keep_alive`` that ran before the copies were freed before the copies read them -- and the copies' own
    allocations could take their memory (equinox's MLP train step: its first layer's gradients, views of such
    buffers, came back holding other values from the compiled segment)."""
    out: list[str] = []
    found = False
    for line in lines:
        returning = _ANY_RETURN.match(line)
        if not returning:
            out.append(line)
            continue
        names = _names_returned(line)
        if names is None:
            return None
        indent = returning.group(1)
        if before:
            copies = [f"_owned_{n}" for n in names]
            out += [f"{indent}{copy} = owned({n})" for copy, n in zip(copies, names)]
            out.append(f"{indent}{before}")
            out.append(f"{indent}return ({', '.join(copies)},)")
        else:
            out.append(f"{indent}return ({', '.join(f'owned({n})' for n in names)},)")
        found = True
    return out if found else None


_BUFFER = re.compile(r"^    ((?:h|d)\d+|_failed) = new_array\((.*)\)$")
_ANY_RETURN = re.compile(r"^(\s*)return\b")


def unowned_buffers(source: str) -> str:
    """``source`` (a generated module) with the buffers each function allocates once per call in its prologue --
    ``h`` buffers of iteration-local values (:func:`lowering.executor.compiled_loops._iteration_local`: never
    carried or passed to a call), ``d`` tables of dimensions, the ``_failed`` flag -- read through views without
    an owner (:func:`lowering.runtime.loop_runtime.unowned_view`), their owners kept alive to every return
    (:func:`~lowering.runtime.loop_runtime.keep_alive`) and every returned value passed through ``owned`` (a chunk
    of a segment returns such a buffer to the next chunk: it is copied). Functions whose returns are not tuples
    of names are left as they are. numba counted a reference, atomically, each time a loop iteration bound such a
    buffer or a view of it to a name: in the Tsit5 solve's segment that was 13 of 32 us of machine code per call
    (a probe of the generated module, timed with and without)."""
    lines = source.split("\n")
    starts = [i for i, line in enumerate(lines) if line.startswith("def ")] + [len(lines)]
    out = lines[:starts[0]]
    for begin, end in zip(starts, starts[1:]):
        out += _unowned_in_function(lines[begin:end])
    return "\n".join(out)


def _unowned_in_function(lines: list[str]) -> list[str]:
    owners = [m.group(1) for m in map(_BUFFER.match, lines) if m]
    if not owners:
        return lines
    guarded = _returning_owned(lines, f"keep_alive(({', '.join(f'{name}_owner' for name in owners)},))")
    if guarded is None:
        return lines
    out: list[str] = []
    for line in guarded:
        match = _BUFFER.match(line)
        if match:
            name = match.group(1)
            out += [f"    {name}_owner = new_array({match.group(2)})", f"    {name} = unowned_view({name}_owner)"]
        else:
            out.append(line)
    return out


def _names_returned(line: str) -> list[str] | None:
    """The names a ``return (a, b, ...)`` line returns (``owned(a)`` read as ``a``), or None for another form."""
    match = re.match(r"^\s*return \((.*)\)$", line)
    if not match:
        return None
    names = [re.sub(r"^owned\((\w+)\)$", r"\1", n.strip()) for n in match.group(1).split(",") if n.strip()]
    return names if all(n.isidentifier() for n in names) else None
