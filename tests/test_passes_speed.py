"""The pass machinery's fast paths do exactly what the xDSL machinery they replace does.

* :class:`passes.verify.ModuleVerifier` (``passes.run(verify=True)``) accepts and
  rejects exactly what ``module.verify()`` does, with the same errors, also
  when an op changes after an equal op was verified;
* the pattern walker (worklist filtered by op class, no confirming sweep for
  ``CONFIRM_FIXED_POINT = False``) gives the output of xDSL's
  ``PatternRewriteWalker`` + ``GreedyRewritePatternApplier``;
* ``util.new_op``, ``util.insert_new_ops``, ``util.retype``, ``util.erase_op``
  build, link and unlink what ``create``, ``Rewriter.insert_op``,
  ``replace_value_with_new_type`` and ``Rewriter.erase_op`` do.

Throughput itself is measured by ``benchmarks/bench_passes.py`` (not in CI).
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType, f32, i32, i64
from xdsl.ir import Block
from xdsl.ir.core import ErasedSSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, prop_def, result_def
from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriteWalker
from xdsl.rewriter import InsertPoint, Rewriter

import passes
from passes.util import erase_op, i64s, insert_new_ops, new_op, retype, tensor_type
from passes.verify import ModuleVerifier
from xla_dialect import XlaBuilder, parse_module
from xla_dialect.layout import Layout
from xla_dialect.ops import data_movement as dm
from xla_dialect.ops import elementwise as ew
from xla_dialect.ops import reduction
from xla_dialect.xdsl_compat import retypes_in_place

GOLDEN = pathlib.Path(__file__).resolve().parent / "passes_golden"


def layered_program(layers: int = 6) -> ModuleOp:
    """Repeated layers (dots, implicit broadcasts, reductions, transposes, reshapes), as the benchmark."""
    b = XlaBuilder("layers")
    x = b.parameter(0, "f32[8,128]")
    w = b.parameter(1, "f32[128,128]")
    bias = b.parameter(2, "f32[128]")
    scale = b.parameter(3, "f32[]")
    for _ in range(layers):
        h = b.add(b.dot(x, w), bias, [1])
        h = b.max(h, b.constant(np.float32(0)))
        m = b.reduce(h, b.constant(np.float32(-np.inf)), lambda p, q: p.builder.max(p, q), [1])
        e = b.exp(b.sub(h, m, [0]))
        s = b.reduce(e, b.constant(np.float32(0)), lambda p, q: p + q, [1])
        t = b.mul(b.transpose(b.div(e, s, [0]), [1, 0]), scale)
        x = b.add(b.tanh(b.reshape(b.transpose(t, [1, 0]), [8, 128])), x)
    return b.build(x)


def golden_inputs() -> list[tuple[str, ModuleOp]]:
    return [(p.stem, parse_module(p.read_text())) for p in sorted(GOLDEN.glob("*.mlir"))]


# ----------------------------------------------------------------------------
# Verification
# ----------------------------------------------------------------------------


def _outcome(check) -> str | None:
    try:
        check()
    except Exception as e:  # noqa: BLE001 - compared as text
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
    return None


def _nth(module, cls, n):
    return [op for op in module.walk() if isinstance(op, cls)][n]


def _set_result_shape(m):
    retype(_nth(m, ew.AddOp, 3).results[0], tensor_type(f32, [8, 127]))


def _set_bad_layout(m):
    retype(_nth(m, ew.AddOp, 3).results[0], tensor_type(f32, [8, 128], Layout((0,))))


def _move_after_return(m):
    op = _nth(m, ew.MulOp, 1)
    op.detach()
    _nth(m, ew.AddOp, 5).parent.add_op(op)


def _retype_reduce_body(m):
    body = _nth(m, reduction.ReduceOp, 2).regions[0].block
    retype(body.first_op.results[0], tensor_type(i32, []))


def _drop_reduce_return(m):
    ret = _nth(m, reduction.ReduceOp, 2).regions[0].block.last_op
    ret.detach()
    ret.erase()


def _retype_reduce_argument(m):
    retype(_nth(m, reduction.ReduceOp, 2).regions[0].block.args[0], tensor_type(i32, []))


def _bad_permutation(m):
    _nth(m, dm.TransposeOp, 2).properties["permutation"] = i64s([0, 1])


def _extra_attribute(m):  # valid
    _nth(m, ew.AddOp, 3).attributes["note"] = i64s([1])


def _erased_operand(m):
    op = _nth(m, ew.AddOp, 3)
    op.operands[0] = ErasedSSAValue(op.operands[0].type, op.operands[0])


MUTATIONS = [None, _set_result_shape, _set_bad_layout, _move_after_return, _retype_reduce_body,
             _drop_reduce_return, _retype_reduce_argument, _bad_permutation, _extra_attribute, _erased_operand]


@pytest.mark.parametrize("mutate", MUTATIONS, ids=lambda f: f.__name__.strip("_") if f else "valid")
@pytest.mark.parametrize("pipeline", ["canonicalize-broadcasts", "canonicalize-broadcasts,assign-layouts{target=tpu}"])
def test_verifier_agrees_with_module_verify_after_a_change(mutate, pipeline):
    module = layered_program(4)
    passes.run(module, pipeline, verify=False)
    verifier = ModuleVerifier()
    verifier.verify(module)  # every key of the valid module is now known
    if mutate is not None:
        mutate(module)
    expected = _outcome(module.verify)
    assert _outcome(lambda: verifier.verify(module)) == expected
    assert _outcome(lambda: ModuleVerifier().verify(module)) == expected
    if mutate not in (None, _extra_attribute):
        assert expected is not None


@pytest.mark.parametrize("name,module", golden_inputs(), ids=lambda x: x if isinstance(x, str) else "")
def test_verifier_accepts_what_module_verify_accepts(name, module):
    verifier = ModuleVerifier()
    for pipeline in ("canonicalize-broadcasts,assign-layouts{target=tpu}", "tile-layouts,cse,dce"):
        passes.run(module, pipeline, verify=False)
        assert _outcome(module.verify) is None
        verifier.verify(module)


def test_run_verify_names_the_pass_that_broke_the_program():
    module = layered_program(2)

    class Breaker(passes.PatternPass):
        name = "test-break-layout"

        def apply(self, ctx, op):
            _set_bad_layout(op)

    pipeline = [*passes.parse_pipeline("canonicalize-broadcasts,cse").passes, Breaker()]
    with pytest.raises(passes.PassError, match=r"pass test-break-layout produced invalid IR: .*hlo\.add"):
        passes.run(module, pipeline)


# ----------------------------------------------------------------------------
# Pattern walker
# ----------------------------------------------------------------------------


def _xdsl_rewrite(pass_: passes.PatternPass, module: ModuleOp) -> None:
    """``pass_``'s patterns applied by xDSL's own walker and applier."""
    walker = PatternRewriteWalker(GreedyRewritePatternApplier(pass_.patterns(), dce_enabled=False),
                                  walk_reverse=pass_.WALK_REVERSE, apply_recursively=pass_.APPLY_RECURSIVELY)
    walker.rewrite_module(module)


@pytest.mark.parametrize("spec", ["canonicalize-broadcasts", "simplify", "dce", "fold-constants"])
def test_pattern_walker_gives_xdsls_result(spec):
    programs = [("layers", layered_program(3))] + golden_inputs()
    pass_ = passes.parse_pipeline(spec).passes[0]
    for name, module in programs:
        ours, theirs = module.clone(), module.clone()
        passes.run(ours, spec, verify=False)
        _xdsl_rewrite(pass_, theirs)
        assert str(ours) == str(theirs), f"{spec} on {name}"


# ----------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------


@irdl_op_definition
class _DefaultsOp(IRDLOperation):
    """A test op with a default-valued property (what IRDL's __post_init__ fills in)."""

    name = "test.defaults"
    x = operand_def()
    out = result_def()
    level = prop_def(IntegerAttr, default_value=IntegerAttr(3, i64))


@pytest.mark.parametrize("cls,props", [(ew.AddOp, {}), (dm.TransposeOp, {"permutation": i64s([1, 0])}),
                                       (_DefaultsOp, {}), (_DefaultsOp, {"level": IntegerAttr(7, i64)})])
def test_new_op_builds_what_create_builds(cls, props):
    t = TensorType(f32, [2, 2])
    block = Block(arg_types=[t, t])
    operands = block.args[: 2 if cls is ew.AddOp else 1]
    ours = new_op(cls, operands, props, [t], {"tag": i64s([1])})
    theirs = cls.create(operands=operands, properties=props, result_types=[t], attributes={"tag": i64s([1])})
    assert vars(ours).keys() == vars(theirs).keys()
    assert ours.properties == theirs.properties and ours.attributes == theirs.attributes
    assert ours.location == theirs.location and ours.regions == theirs.regions == ()
    assert list(ours.successors) == list(theirs.successors) == []
    assert [r.type for r in ours.results] == [r.type for r in theirs.results]
    assert all(r.op is ours and r.index == i for i, r in enumerate(ours.results))
    assert [(u.operation, u.index) for v in operands for u in v.uses if u.operation is ours] == \
        [(ours, i) for i in range(len(operands))]
    block.add_ops([ours, theirs])
    assert str(ours) == str(theirs)  # printed alike


@pytest.mark.parametrize("where", ["before first", "before middle", "at end", "empty block"])
def test_insert_new_ops_links_like_rewriter(where):
    def build(insert):
        block = Block()
        existing = [] if where == "empty block" else [ew.AddOp.create(result_types=[i32]) for _ in range(3)]
        block.add_ops(existing)
        new = [ew.AddOp.create(result_types=[i32]) for _ in range(2)]
        point = (InsertPoint.at_end(block) if where in ("at end", "empty block")
                 else InsertPoint.before(existing[0 if where == "before first" else 1]))
        insert(new, point)
        everything = existing + new
        forward = [everything.index(op) for op in block.ops]
        backward, op = [], block.last_op
        while op is not None:
            backward.append(everything.index(op))
            op = op.prev_op
        assert backward[::-1] == forward and all(op.parent is block for op in block.ops)
        return forward

    assert build(insert_new_ops) == build(Rewriter.insert_op)


def test_retype_keeps_the_value_and_its_uses():
    block = Block(arg_types=[TensorType(f32, [2])])
    arg = block.args[0]
    user = ew.NegOp.create(operands=[arg], result_types=[arg.type])
    block.add_op(user)
    arg.name_hint = "x"
    new_type = tensor_type(f32, [2], Layout((0,)))
    new = retype(arg, new_type)
    if retypes_in_place():  # xDSL's fields as expected (xla_dialect.xdsl_compat); else a new value took over
        assert new is arg and arg.name_hint == "x"
    assert new.type == new_type and user.operands[0] is new
    assert [u.operation for u in new.uses] == [user]


@pytest.mark.parametrize("used", [False, True])
def test_erase_op_unlinks_like_rewriter(used):
    def build(erase):
        block = Block(arg_types=[TensorType(f32, [2])])
        ops = [ew.NegOp.create(operands=[block.args[0]], result_types=[block.args[0].type]) for _ in range(3)]
        block.add_ops(ops)
        if used:
            block.add_op(ew.NegOp.create(operands=[ops[1].results[0]], result_types=[block.args[0].type]))
        try:
            erase(ops[1])
        except Exception as e:  # noqa: BLE001 - compared
            return type(e).__name__
        order = [ops.index(op) if op in ops else "user" for op in block.ops]
        users = sorted(ops.index(u.operation) for u in block.args[0].uses)
        return order, ops[1].parent, users, [r.first_use for r in ops[1].results]

    assert build(erase_op) == build(Rewriter.erase_op)
