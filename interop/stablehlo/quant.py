"""Quantized StableHLO (``!quant.uniform`` element types), imported as hlo's quantized types.

jaxlib's MLIR Python bindings do not register the ``quant`` dialect, so a
module with quantized types cannot be parsed as it is. :func:`expand_quantized_text`
rewrites the text first: every quantized element type becomes its expressed
type (``tensor<11x!quant.uniform<i8:f32, 0.5:-3>>`` -> ``tensor<11xf32>``),
``uniform_quantize``/``uniform_dequantize`` become ``convert`` ops, and a table
keeps, per source line, the quantized types the line had: of each op's results,
of each function's arguments.

The importer then puts the quantized types back: ``hlo.uniform_quantize`` /
``hlo.uniform_dequantize`` for the rewritten conversions, and every other op
with quantized results is imported with those result types (the hlo dialect
has the same ``!quant.uniform`` types, see :mod:`xla_dialect.quant`). The
module is the program as written; ``lowering.compile`` runs it through the
``lower-quantized`` pass (the spec's ``dequantize_op_quantize``).
"""

from __future__ import annotations

import re

from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

from xla_dialect.errors import UnsupportedError
from xla_dialect.literal import DenseLiteralAttr
from xla_dialect.ops.constants import ConstantOp
from xla_dialect.ops.conversion import UniformDequantizeOp, UniformQuantizeOp
from xla_dialect.quant import UniformQuantizedType, closing_angle_bracket, parse_quantized_type

from .attributes import dense_array, top_level_parts

__all__ = ["convert_quantized_op", "expand_quantized_text", "parse_quantized"]


def parse_quantized(text: str) -> UniformQuantizedType:
    """Parse a ``!quant.uniform<...>`` element type spelling (other ``!quant`` types are unsupported)."""
    text = text.strip()
    if not text.startswith("!quant.uniform<"):
        raise UnsupportedError(f"quantized element type {text} is not supported (only !quant.uniform)")
    return parse_quantized_type(text)


# ----------------------------------------------------------------------------
# Emitting the quantized ops
# ----------------------------------------------------------------------------


def _quantized_tensor(like: TensorType, element: UniformQuantizedType) -> TensorType:
    return TensorType(element, like.get_shape(), like.encoding)


def quantized_types(imp, op, result_quant: list) -> list:
    """The result types of MLIR ``op`` with its quantized element types put back."""
    return [t if q is None else _quantized_tensor(t, q) for t, q in zip(imp.result_types(op), result_quant)]


def convert_quantized_op(imp, op, result_quant: list, kind: str) -> list[SSAValue] | None:
    """Convert an op whose results were quantized in the source text.

    ``kind`` is ``"quantize"`` / ``"dequantize"`` for the rewritten
    ``uniform_quantize`` / ``uniform_dequantize`` (now ``convert`` ops), else
    ``"op"``: the op is converted as usual, with the quantized result types.
    """
    if kind == "dequantize":
        return imp.emit(UniformDequantizeOp, imp.operands(op))
    types = quantized_types(imp, op, result_quant)
    if kind == "quantize":
        return imp.emit(UniformQuantizeOp, imp.operands(op), result_types=types)
    if op.name == QUANTIZED_BITCAST:
        from xla_dialect.ops.conversion import BitcastConvertOp

        return imp.emit(BitcastConvertOp, imp.operands(op), result_types=types)
    if op.name == QUANTIZED_CONSTANT:  # storage integers (see _quantized_constant)
        raw = op.attributes["value"]
        storage = TensorType(types[0].element_type.storage.mlir, types[0].get_shape())
        array = dense_array(raw, None, storage)
        literal = DenseLiteralAttr.from_array(array, TensorType(types[0].element_type, types[0].get_shape()))
        return imp.emit(ConstantOp, [], {"value": literal}, result_types=types)
    results = imp.with_result_types(op, types, lambda: imp.convert_unquantized(op))
    if results is None:
        return None
    for i, (value, want) in enumerate(zip(results, types)):
        if value.type != want:
            raise UnsupportedError(f"{imp._where()}: {op.name} on quantized types is not supported "
                                   f"(result #{i} would be {value.type}, not {want})")
    return results


# ----------------------------------------------------------------------------
# Text rewriting
# ----------------------------------------------------------------------------


def _quant_types(line: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of every ``!quant.uniform<...>`` in a line."""
    out = []
    pos = line.find("!quant.")
    while pos >= 0:
        open_ = line.find("<", pos)
        close = closing_angle_bracket(line, open_ + 1)
        end = close + 1 if close >= 0 else len(line)
        out.append((pos, end, line[pos:end]))
        pos = line.find("!quant.", end)
    return out


def _closes(text: str, i: int) -> bool:
    """``text[i]`` closes a bracket (the ``>`` of an arrow ``->`` does not)."""
    c = text[i]
    return c in ")]}" or (c == ">" and (i == 0 or text[i - 1] != "-"))


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
                return top_level_parts(results)
    return [signature]  # one type for every operand and result


_LOC_SUFFIX = re.compile(r"\s+loc\((?:[^()]|\([^()]*\))*\)\s*$")


def expand_quantized_text(text: str) -> tuple[str, dict[int, tuple[str, list[UniformQuantizedType | None]]]]:
    """Rewrite quantized StableHLO text so that jaxlib can parse it (see the module docstring).

    Returns the new text and ``{line: (kind, quantized types)}`` for the lines
    that had quantized types: ``kind`` is quantize, dequantize or op (with the
    quantized element type of each result, or None) or func (of each argument).
    """
    lines = text.split("\n")
    table: dict[int, tuple[str, list[UniformQuantizedType | None]]] = {}
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
    if stripped.startswith("func.func"):
        table[number] = ("func", [_quantized_or_none(t) for t in _argument_types(code)])
    elif not stripped.startswith(("return", "func.return", "}", "^")):
        signature = _signature(code)
        infos = [_quantized_or_none(t) for t in _result_types(signature or "")]
        kind = ("quantize" if "stablehlo.uniform_quantize" in code else
                "dequantize" if "stablehlo.uniform_dequantize" in code else "op")
        table[number] = (kind, infos)
        code = code.replace("stablehlo.uniform_quantize", "stablehlo.convert")
        code = code.replace("stablehlo.uniform_dequantize", "stablehlo.convert")
        # A bitcast between a quantized type and its storage integers would be f32 <-> i8 in the rewritten
        # text, which jaxlib rejects: it becomes an op jaxlib does not verify (QUANTIZED_BITCAST).
        code = _QUOTED_BITCAST.sub(f'"{QUANTIZED_BITCAST}"', code)
        code = _PRETTY_BITCAST.sub(lambda m: f'"{QUANTIZED_BITCAST}"({m.group(1)}) :', code)
    if "stablehlo.constant" in code and number in table:
        return _quantized_constant(code)
    for start, end, qtext in reversed(_quant_types(code)):
        code = code[:start] + _expressed_name(qtext) + code[end:]
    return code


QUANTIZED_BITCAST = "hlo_quant.bitcast_convert"
"""The (unregistered) op a ``stablehlo.bitcast_convert`` on quantized types becomes in the rewritten text;
the importer reads it as ``hlo.bitcast_convert`` with the quantized types restored."""

_QUOTED_BITCAST = re.compile(r'"stablehlo\.bitcast_convert"')
_PRETTY_BITCAST = re.compile(r'\bstablehlo\.bitcast_convert\s+(%[\w#]+)\s*:')

QUANTIZED_CONSTANT = "hlo_quant.constant"
"""The (unregistered) op a quantized ``stablehlo.constant`` becomes in the rewritten text: its
``value`` holds the storage integers, its result has the expressed type like every other value."""


def _quantized_constant(code: str) -> str:
    """``%c = stablehlo.constant dense<...> : tensor<4x!quant.uniform<...>>`` (pretty or generic form)
    -> ``%c = "hlo_quant.constant"() {value = dense<...> : tensor<4xi8>} : () -> tensor<4xf32>``."""
    m = re.match(r'(\s*%[^=]+=\s*)(?:stablehlo\.constant|"stablehlo\.constant"\(\)\s*<?\{\s*value\s*=)\s*(.*)$', code)
    signature = _signature(code)
    if not m or signature is None:
        raise UnsupportedError(f"cannot read the quantized constant {code.strip()[:80]}")
    lhs, rest = m.group(1), m.group(2)
    literal = rest[:rest.rindex(" : ")].strip()
    if literal.endswith("}>") or literal.endswith("}"):  # generic form: value = dense<...> : T}> : () -> T
        literal = literal[:literal.index(" : ")].strip()
    result = _result_types(signature)[-1]
    storage = expressed = result
    for start, end, qtext in reversed(_quant_types(result)):
        storage = storage[:start] + _storage_name(qtext) + storage[end:]
        expressed = expressed[:start] + _expressed_name(qtext) + expressed[end:]
    return f'{lhs}"{QUANTIZED_CONSTANT}"() {{value = {literal} : {storage}}} : () -> {expressed}'


def _quantized_or_none(type_text: str) -> UniformQuantizedType | None:
    """The quantized element type in a tensor type's spelling, or None."""
    q = _quant_types(type_text)
    return parse_quantized(q[0][2]) if q else None


def _argument_types(func_line: str) -> list[str]:
    """The argument types of a ``func.func @name(%a: T, ...)`` line (its first parenthesis)."""
    open_ = func_line.find("(")
    if open_ < 0:
        return []
    depth = 0
    for i in range(open_, len(func_line)):
        c = func_line[i]
        if c in "<([{":
            depth += 1
        elif _closes(func_line, i):
            depth -= 1
            if depth == 0:
                args = top_level_parts(func_line[open_ + 1:i])
                return [a.split(":", 1)[1].strip() if ":" in a else "" for a in args]
    return []


def _storage_name(qtext: str) -> str:
    return str(parse_quantized(qtext).storage.mlir)


def _expressed_name(qtext: str) -> str:
    return str(parse_quantized(qtext).expressed.mlir)
