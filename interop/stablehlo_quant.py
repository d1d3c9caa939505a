"""Quantized StableHLO (``!quant.uniform`` element types), imported as float hlo ops.

jaxlib's MLIR Python bindings do not register the ``quant`` dialect, so a
module with quantized types cannot be parsed as it is. :func:`expand_quantized_text`
rewrites the text first: every quantized element type becomes its expressed
type (``tensor<11x!quant.uniform<i8:f32, 0.5:-3>>`` -> ``tensor<11xf32>``),
``uniform_quantize``/``uniform_dequantize`` become ``convert`` ops, and a table
keeps, per source line, the quantization of each op's results.

A quantized value is then carried as the float value it stands for (the
"fake quantization" form), which gives exactly the StableHLO specification's
results:

* ``uniform_quantize(x)``: ``dequantize(quantize(x))`` with the spec's
  ``quantize`` (``round_nearest_even(clamp(x / scale + zero_point))`` in the
  storage range) and ``dequantize`` (``(q - zero_point) * scale``);
  requantizing a quantized value is the same formula on its float value;
* ``uniform_dequantize``: the value itself;
* any other op with quantized results: the op on the float values, then each
  quantized result through ``dequantize(quantize(.))`` - the spec's
  ``dequantize_op_quantize`` (hybrid float x quantized forms included); data
  movement ops whose results keep their operand's quantization need nothing.

Per-axis quantization (``!quant.uniform<i8:f32:1, {0.1:-1, 0.2:3}>``) uses one
scale and zero point per index of the quantized dimension. Function arguments
and results of quantized type are taken and returned as these float values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

from xla_dialect.errors import UnsupportedError
from xla_dialect.literal import DenseLiteralAttr
from xla_dialect.ops.base import i64_array
from xla_dialect.types import ElementType, element_type_named

__all__ = ["QuantInfo", "convert_quantized_op", "expand_quantized_text", "parse_quantized"]


@dataclass(frozen=True)
class QuantInfo:
    """The parameters of one ``!quant.uniform`` element type."""

    storage: ElementType
    expressed: ElementType
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int | None  # quantized dimension of per-axis quantization
    storage_min: int
    storage_max: int


_QUANT = re.compile(
    r"!quant\.uniform<(?P<storage>[a-z]+\d+)(?:<(?P<min>-?\d+):(?P<max>-?\d+)>)?:(?P<expressed>[a-z0-9]+)"
    r"(?::(?P<axis>\d+))?,\s*(?P<params>.*)>$"
)
_PARAM = re.compile(r"\s*([-+0-9.eE]+|[-+]?inf|nan)(?::(-?\d+))?\s*")

_STORAGE_NAMES = {"i": "s", "ui": "u", "si": "s", "u": "u"}


def _element_of(mlir_name: str) -> ElementType:
    m = re.fullmatch(r"(ui|si|i|u)(\d+)", mlir_name)
    if m:
        return element_type_named(_STORAGE_NAMES[m.group(1)] + m.group(2))
    return element_type_named(mlir_name)


def parse_quantized(text: str) -> QuantInfo:
    """Parse a ``!quant.uniform<...>`` element type spelling."""
    m = _QUANT.match(text.strip())
    if not m:
        raise UnsupportedError(f"quantized element type {text} is not supported (only !quant.uniform)")
    storage = _element_of(m.group("storage"))
    expressed = _element_of(m.group("expressed"))
    params = m.group("params").strip()
    if params.startswith("{"):
        params = params[1:params.rindex("}")]
    scales, zero_points = [], []
    for part in params.split(","):
        p = _PARAM.fullmatch(part)
        if not p:
            raise UnsupportedError(f"quantized element type {text}: cannot read scale/zero point {part!r}")
        scales.append(float(p.group(1)))
        zero_points.append(int(p.group(2) or 0))
    bits = storage.bits
    signed = storage.kind == "sint"
    low = -(1 << (bits - 1)) if signed else 0
    high = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
    if m.group("min") is not None:
        low, high = int(m.group("min")), int(m.group("max"))
    axis = int(m.group("axis")) if m.group("axis") is not None else None
    return QuantInfo(storage, expressed, tuple(scales), tuple(zero_points), axis, low, high)


# ----------------------------------------------------------------------------
# Emitting the expansions
# ----------------------------------------------------------------------------

STORAGE_OPS = frozenset({
    "stablehlo.transpose", "stablehlo.reshape", "stablehlo.broadcast_in_dim", "stablehlo.slice",
    "stablehlo.concatenate", "stablehlo.reverse", "stablehlo.gather", "stablehlo.dynamic_slice",
    "stablehlo.dynamic_update_slice", "stablehlo.pad", "stablehlo.select", "stablehlo.get_tuple_element",
    "stablehlo.tuple", "stablehlo.optimization_barrier",
})
"""Ops that move quantized values without computing on them: their results need no
requantization when they keep the quantization of their operands."""


def _const(imp, array: np.ndarray, element: ElementType) -> SSAValue:
    t = TensorType(element.mlir, list(array.shape))
    (value,) = imp.emit(imp.ops_by_name["hlo.constant"], [],
                        {"value": DenseLiteralAttr.from_array(np.asarray(array, dtype=element.dtype), t)}, (), [t])
    return value


def _per_element(imp, info: QuantInfo, values, element: ElementType, shape: list[int]) -> SSAValue:
    """Scales or zero points as an array of ``shape`` (broadcast along the quantized axis)."""
    ops = imp.ops_by_name
    if info.axis is None:
        scalar = _const(imp, np.array(values[0]), element)
        dims: list[int] = []
        source = scalar
    else:
        if len(values) != shape[info.axis]:
            raise UnsupportedError(f"{imp._where()}: {len(values)} per-axis scales for dimension {info.axis} "
                                   f"of size {shape[info.axis]}")
        source = _const(imp, np.array(values), element)
        dims = [info.axis]
    (out,) = imp.emit(ops["hlo.broadcast_in_dim"], [source], {"broadcast_dimensions": i64_array(dims)}, (),
                      [TensorType(element.mlir, shape)])
    return out


def quantize(imp, x: SSAValue, info: QuantInfo) -> SSAValue:
    """The spec's ``quantize``: float array -> storage array."""
    ops = imp.ops_by_name
    shape = list(x.type.get_shape())
    expressed = info.expressed
    ftype = TensorType(expressed.mlir, shape)
    scales = _per_element(imp, info, info.scales, expressed, shape)
    zero_points = _per_element(imp, info, info.zero_points, expressed, shape)
    (scaled,) = imp.emit(ops["hlo.divide"], [x, scales], {}, (), [ftype])
    (shifted,) = imp.emit(ops["hlo.add"], [scaled, zero_points], {}, (), [ftype])
    low = _const(imp, np.array(info.storage_min), expressed)
    high = _const(imp, np.array(info.storage_max), expressed)
    (clamped,) = imp.emit(ops["hlo.clamp"], [low, shifted, high], {}, (), [ftype])
    (rounded,) = imp.emit(ops["hlo.round_nearest_even"], [clamped], {}, (), [ftype])
    (out,) = imp.emit(ops["hlo.convert"], [rounded], {}, (), [TensorType(info.storage.mlir, shape)])
    return out


def dequantize(imp, q: SSAValue, info: QuantInfo) -> SSAValue:
    """The spec's ``dequantize``: storage array -> float array."""
    ops = imp.ops_by_name
    shape = list(q.type.get_shape())
    s64 = element_type_named("s64")
    wide_type = TensorType(s64.mlir, shape)
    (wide,) = imp.emit(ops["hlo.convert"], [q], {}, (), [wide_type])
    zero_points = _per_element(imp, info, info.zero_points, s64, shape)
    (centred,) = imp.emit(ops["hlo.subtract"], [wide, zero_points], {}, (), [wide_type])
    ftype = TensorType(info.expressed.mlir, shape)
    (real,) = imp.emit(ops["hlo.convert"], [centred], {}, (), [ftype])
    scales = _per_element(imp, info, info.scales, info.expressed, shape)
    (out,) = imp.emit(ops["hlo.multiply"], [real, scales], {}, (), [ftype])
    return out


def fake_quantize(imp, x: SSAValue, info: QuantInfo) -> SSAValue:
    """``dequantize(quantize(x))``: the float value a quantized result stands for."""
    return dequantize(imp, quantize(imp, x, info), info)


def convert_quantized_op(imp, op, result_infos: list[QuantInfo | None], kind: str) -> list[SSAValue] | None:
    """Convert an op whose results were quantized (see the module docstring).

    ``kind`` is ``"quantize"`` / ``"dequantize"`` for the rewritten
    ``uniform_quantize`` / ``uniform_dequantize`` (now ``convert`` ops), else ``"op"``.
    """
    if kind == "dequantize":
        return imp.operands(op)
    if kind == "quantize":
        (x,) = imp.operands(op)
        return [fake_quantize(imp, x, result_infos[0])]
    from .stablehlo_import import convert_unquantized

    results = convert_unquantized(imp, op)
    if results is None:
        return None
    name = op.name
    if name in STORAGE_OPS:
        operand_infos = {imp.quant_values.get(v) for v in imp.operands(op)} - {None}
        if all(i is None or i in operand_infos for i in result_infos) and operand_infos:
            out = list(results)
            for v, i in zip(out, result_infos):
                if i is not None:
                    imp.quant_values[v] = i
            return out
    out = []
    for v, i in zip(results, result_infos):
        if i is not None:
            v = fake_quantize(imp, v, i)
            imp.quant_values[v] = i
        out.append(v)
    return out


# ----------------------------------------------------------------------------
# Text rewriting
# ----------------------------------------------------------------------------


def _closing(text: str, start: int) -> int:
    """Index just past the ``>`` matching the ``<`` at ``text[start - 1]``."""
    depth = 1
    i = start
    while depth and i < len(text):
        c = text[i]
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        i += 1
    return i


def _quant_types(line: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of every ``!quant.uniform<...>`` in a line."""
    out = []
    pos = line.find("!quant.")
    while pos >= 0:
        open_ = line.find("<", pos)
        end = _closing(line, open_ + 1)
        out.append((pos, end, line[pos:end]))
        pos = line.find("!quant.", end)
    return out


def _closes(text: str, i: int) -> bool:
    """``text[i]`` closes a bracket (the ``>`` of an arrow ``->`` does not)."""
    c = text[i]
    return c in ")]}" or (c == ">" and (i == 0 or text[i - 1] != "-"))


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "<([{":
            depth += 1
        elif _closes(text, i):
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _signature(line: str) -> str | None:
    """The trailing type signature of an op line (after the last top-level ``" : "``)."""
    depth, last = 0, None
    for i, c in enumerate(line):
        if c in "<([{":
            depth += 1
        elif _closes(line, i):
            depth -= 1
        elif c == ":" and depth == 0 and line[i - 1:i + 2] == " : ":
            last = i
    return line[last + 1:].strip() if last is not None else None


def _result_types(signature: str) -> list[str]:
    if "->" in signature and signature.startswith("("):
        depth = 0
        for i, c in enumerate(signature):
            if c in "<([{":
                depth += 1
            elif _closes(signature, i):
                depth -= 1
            elif c == "-" and depth == 0 and signature[i:i + 2] == "->":
                results = signature[i + 2:].strip()
                if results.startswith("(") and results.endswith(")"):
                    results = results[1:-1]
                return _split_top(results)
    return [signature]  # one type for every operand and result


_LOC_SUFFIX = re.compile(r"\s+loc\((?:[^()]|\([^()]*\))*\)\s*$")


def expand_quantized_text(text: str) -> tuple[str, dict[int, tuple[str, list[QuantInfo | None]]]]:
    """Rewrite quantized StableHLO text so that jaxlib can parse it (see the module docstring).

    Returns the new text and ``{line: (kind, result quantizations)}`` for the
    ops whose results were quantized (``kind``: quantize, dequantize or op).
    """
    lines = text.split("\n")
    table: dict[int, tuple[str, list[QuantInfo | None]]] = {}
    for number, line in enumerate(lines, 1):
        if "!quant." not in line:
            if "stablehlo.uniform_" in line:
                raise UnsupportedError(f"line {number}: uniform (de)quantization without a quantized type")
            continue
        try:
            lines[number - 1] = _rewrite_line(line, number, table)
        except UnsupportedError as e:
            raise UnsupportedError(f"line {number} of the quantized program: {e}") from None
    return "\n".join(lines), table


def _rewrite_line(line: str, number: int, table: dict) -> str:
    """One line with its quantized types replaced; records its op's result quantization in ``table``."""
    code = _LOC_SUFFIX.sub("", line)  # the op's location must be its line: drop explicit ones
    stripped = code.strip()
    if not stripped.startswith(("func.func", "return", "func.return", "}", "^")):
        signature = _signature(code)
        infos: list[QuantInfo | None] = []
        for t in _result_types(signature or ""):
            q = _quant_types(t)
            infos.append(parse_quantized(q[0][2]) if q else None)
        kind = ("quantize" if "stablehlo.uniform_quantize" in code else
                "dequantize" if "stablehlo.uniform_dequantize" in code else "op")
        table[number] = (kind, infos)
        code = code.replace("stablehlo.uniform_quantize", "stablehlo.convert")
        code = code.replace("stablehlo.uniform_dequantize", "stablehlo.convert")
    for start, end, qtext in reversed(_quant_types(code)):
        code = code[:start] + _expressed_name(qtext) + code[end:]
    return code


def _expressed_name(qtext: str) -> str:
    info = parse_quantized(qtext)
    return str(info.expressed.mlir)
