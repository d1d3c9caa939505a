"""Other backends' documented matmul numerics, reproduced on the CPU: which one explains a device's result?

XLA computes f32 ``dot``, ``dot_general`` and ``convolution`` at each backend's precision for the op's
``precision_config`` (jax's ``precision=`` / ``jax.default_matmul_precision``), as jax documents
(``jax.lax.Precision``):

- TPU: ``DEFAULT`` rounds the operands to bfloat16 and accumulates in f32 (one MXU pass); ``HIGH`` splits each
  operand into two bfloat16 parts, a = hi + lo, and sums the three largest products (``bfloat16_3x``:
  hi*hi + hi*lo + lo*hi); ``HIGHEST`` splits into three parts and sums six products (``bfloat16_6x``), about
  f32's precision.
- GPU (Ampere and later): ``DEFAULT`` and ``HIGH`` round the operands to TensorFloat-32 (8 exponent bits, 10
  mantissa bits) and accumulate in f32; ``HIGHEST`` computes in f32.
- CPU: every precision in f32 (the executor's own numerics).

:func:`emulate_device` rewrites a program so that the executor computes its f32 dots and convolutions that
way: the operand rounding (``hlo.reduce_precision``, round to nearest even) and the passes are those the
device makes; the order of the f32 accumulation inside each dot stays the CPU's, which the devices do not
document, so results agree with a device's within a few ULPs of the sums rather than bit for bit.
``find_divergence(..., against={"device": "tpu"})`` compares a run with such a reference, op by op.
"""

from __future__ import annotations

from xdsl.dialects.builtin import Float32Type, IntegerAttr, ModuleOp, TensorType, i32
from xdsl.ir import Operation
from xdsl.rewriter import InsertPoint, Rewriter

from xla_dialect.errors import XlaError
from xla_dialect.ops.linalg import DotGeneralOp, DotOp
from xla_dialect.ops.windowed import ConvolutionOp

__all__ = ["DEVICES", "emulate_device", "passes_for"]

DEVICES = {
    "cpu": {"DEFAULT": "f32", "HIGH": "f32", "HIGHEST": "f32"},
    "tpu": {"DEFAULT": "bf16", "HIGH": "bf16_3x", "HIGHEST": "bf16_6x"},
    "gpu": {"DEFAULT": "tf32", "HIGH": "tf32", "HIGHEST": "f32"},
}
"""Device -> precision of the op -> how its f32 dots are computed."""

_BF16 = (8, 7)
_TF32 = (8, 10)
_OPS = (DotOp, DotGeneralOp, ConvolutionOp)
_RANK = {"DEFAULT": 0, "HIGH": 1, "HIGHEST": 2}


def passes_for(op: Operation, device: str) -> str:
    """How ``device`` computes the f32 dot or convolution ``op``: ``f32``, ``bf16``, ``bf16_3x``, ``bf16_6x`` or
    ``tf32`` (the higher of the operands' precisions: XLA passes both)."""
    config = op.properties.get("precision_config")
    names = [a.data for a in config.data] if config is not None else []
    precision = max(names, key=_RANK.__getitem__) if names else "DEFAULT"
    return DEVICES[device][precision]


def _rounded(value, bits, before: Operation):
    from xla_dialect.ops.numerics import ReducePrecisionOp

    op = ReducePrecisionOp.create(operands=[value], result_types=[value.type],
                                  properties={"exponent_bits": IntegerAttr(bits[0], i32),
                                              "mantissa_bits": IntegerAttr(bits[1], i32)})
    Rewriter.insert_op(op, InsertPoint.before(before))
    return op.results[0]


def _binary(cls, a, b, before: Operation):
    op = cls.create(operands=[a, b], result_types=[a.type])
    Rewriter.insert_op(op, InsertPoint.before(before))
    return op.results[0]


def _parts(value, count: int, before: Operation) -> list:
    """``value`` as ``count`` bfloat16 parts (f32 values), largest first: hi = bf16(a), mid = bf16(a - hi), ..."""
    from xla_dialect.ops.elementwise import SubOp

    parts, rest = [], value
    for k in range(count):
        part = _rounded(rest, _BF16, before)
        parts.append(part)
        if k + 1 < count:
            rest = _binary(SubOp, rest, part, before)
    return parts


def _product(op: Operation, a, b):
    """A copy of ``op`` on operands ``a``, ``b`` before it (its loc kept, its probe number not)."""
    copy = op.clone()
    copy.attributes.pop("debug.op", None)
    copy.operands = [a, b]
    Rewriter.insert_op(copy, InsertPoint.before(op))
    return copy.results[0]


def _emulate(op: Operation, how: str) -> None:
    from xla_dialect.ops.elementwise import AddOp

    lhs, rhs = op.operands
    if how == "f32":
        return
    if how in ("bf16", "tf32"):
        bits = _BF16 if how == "bf16" else _TF32
        op.operands = [_rounded(lhs, bits, op), _rounded(rhs, bits, op)]
        return
    count = 2 if how == "bf16_3x" else 3
    a, b = _parts(lhs, count, op), _parts(rhs, count, op)
    # the products of the passes, the smallest first (each an f32 dot of bf16 values)
    if count == 2:
        terms = [(1, 0), (0, 1), (0, 0)]
    else:
        terms = [(2, 0), (1, 1), (0, 2), (1, 0), (0, 1), (0, 0)]
    total = None
    for i, j in terms:
        p = _product(op, a[i], b[j])
        total = p if total is None else _binary(AddOp, total, p, op)
    # the sum stands for the op: its location and probe number move there, the op itself goes
    total.owner.attributes.update(op.attributes)
    op.results[0].replace_all_uses_with(total)
    op.detach()
    op.erase()


def emulate_device(module: ModuleOp, device: str) -> ModuleOp:
    """A copy of ``module`` whose f32 ``dot``, ``dot_general`` and ``convolution`` ops compute as ``device``
    (``"tpu"``, ``"gpu"`` or ``"cpu"``) does for their ``precision_config``: operands rounded to bfloat16 or
    TF32, or split into bfloat16 parts whose products are summed (see the module's docstring and
    :data:`DEVICES`). Other ops are unchanged. Raises :class:`XlaError` for an unknown device."""
    if device not in DEVICES:
        raise XlaError(f"emulate_device: unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    copy = module.clone()
    for op in [o for o in copy.walk() if isinstance(o, _OPS)]:
        types = [v.type for v in op.operands] + [op.results[0].type]
        if all(isinstance(t, TensorType) and isinstance(t.element_type, Float32Type) for t in types):
            _emulate(op, passes_for(op, device))
    try:
        copy.verify()
    except Exception as e:  # noqa: BLE001
        raise XlaError(f"emulate_device({device!r}): the rewritten program does not verify: {e}") from None
    return copy
