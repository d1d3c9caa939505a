"""Constants of generated code passed in a few packed arrays instead of one argument each.

A compiled segment or loop reads the program's constants -- scalars, one-element arrays, small tables -- as
arguments of its numba function, so that its source (and numba's cached machine code) depends on the program's
structure only. Each argument costs the call from Python 40-70 ns (numba's dispatcher types, fingerprints and
unboxes it, and an array gets a reference-counted wrapper): diffrax's Tsit5 solve passed 155 (59 int32 and 29 bool
scalars, 53 one-element arrays), 10 us of a 51 us call. :func:`pack_constants` rewrites the function to take them
in one array per element type -- scalars read by index, arrays as views at an offset
(:func:`lowering.runtime.loop_runtime.packed_array`) -- assigned to the same names in a prologue, so the rest of the
code is unchanged. Where every value the function returns can be passed through ``owned`` (a copy of a view
without an owner), the arrays are such views (:func:`~lowering.runtime.loop_runtime.borrowed_array`): the function's
argument keeps their memory alive, and numba's reference counting of them -- atomic operations each time a constant
is bound to another name, 15 in the Tsit5 solve's stage loop -- becomes a null test. Values whose object identity matters (an array the runtime changes after the code is compiled,
:data:`SHARED`) and types the packing does not cover stay arguments of their own.
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
    rest, guarded = _returns_owned(source[body:stop])
    if guarded:  # (views without an owner: their reference counts are null tests, not atomic operations)
        prologue = [line.replace("= packed_array(", "= borrowed_array(", 1) for line in prologue]
    else:
        rest = source[body:stop]
    text = source[:start] + f"{header}{signature}):\n" + "\n".join(prologue) + "\n" + rest + source[stop:]
    return text, [*packed, *kept_values]


_RETURN = re.compile(r"^    return \((.*)\)$")


def _returns_owned(body: str) -> tuple[str, bool]:
    """``body`` (a function's) with every value it returns passed through ``owned`` (a borrowed constant is copied
    before it reaches Python), and whether every return could be: each a tuple of names, at the function's own
    level."""
    lines = body.split("\n")
    found = False
    for i, line in enumerate(lines):
        if re.match(r"^\s*return\b", line):
            match = _RETURN.match(line)
            names = [n.strip() for n in match.group(1).split(",")] if match else []
            if not match or not all(n.isidentifier() for n in names if n):
                return body, False
            lines[i] = f"    return ({', '.join(f'owned({n})' for n in names if n)},)"
            found = True
    return "\n".join(lines), found
