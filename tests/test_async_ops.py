"""hlo.async_start / hlo.async_done (the StableHLO spec's async ops) and the future type."""

from __future__ import annotations

import numpy as np
import pytest

import lowering
from interop import export_stablehlo, import_stablehlo
from xla_dialect import XlaBuilder, parse_module
from xla_dialect.errors import BuilderError, HloVerifyError

SPEC_EXAMPLE = """
func.func @main(%x: tensor<8x2xf32>) -> tensor<8x8xf32> {
  %0 = "stablehlo.async_start"(%x) ({
    %1 = "stablehlo.all_gather"(%x) {
      all_gather_dim = 1 : i64,
      replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>
    } : (tensor<8x2xf32>) -> tensor<8x8xf32>
    "stablehlo.return"(%1) : (tensor<8x8xf32>) -> ()
  }) : (tensor<8x2xf32>) -> !stablehlo.future<tensor<8x8xf32>>
  %2 = "stablehlo.async_done"(%0) : (!stablehlo.future<tensor<8x8xf32>>) -> tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}
"""


def _gathered(outs):
    return [o[0] for o in outs]


def test_spec_example_all_gather_through_a_future():
    module = import_stablehlo(SPEC_EXAMPLE)  # jaxlib 0.10 cannot parse it: the importer's fallback reads it
    exe = lowering.compile(module, num_replicas=8)
    xs = [np.full((8, 2), d, np.float32) for d in range(8)]
    results = _gathered(exe(*[[x] for x in xs]))
    for d, r in enumerate(results):
        group = [0, 2, 4, 6] if d % 2 == 0 else [1, 3, 5, 7]
        np.testing.assert_array_equal(r, np.concatenate([xs[g] for g in group], axis=1))
    again = import_stablehlo(export_stablehlo(module))  # the exporter writes the spec's syntax back
    assert again.is_structurally_equivalent(module)
    assert parse_module(str(module)).is_structurally_equivalent(module)  # and the hlo assembly format


def test_builder_async_slice_and_several_results():
    b = XlaBuilder("slices")
    x = b.parameter(0, "f32[6]")
    start = b.parameter(1, "s32[]")
    future = b.async_start([x, start], lambda sb, v, s: sb.dynamic_slice(v, [s], [2]))
    b.async_done(future)
    exe = lowering.compile(b.build())
    (out,) = exe(np.arange(6, dtype=np.float32), np.int32(3))
    np.testing.assert_array_equal(out, [3, 4])


def test_async_start_constraints():
    b = XlaBuilder("bad")
    x = b.parameter(0, "f32[4]")
    with pytest.raises(BuilderError, match="body op must be a collective or a slice"):
        b.async_start([x], lambda sb, v: sb.abs(v))
    with pytest.raises(BuilderError, match="must take exactly the operands given to async_start"):
        b.async_start([x], lambda sb, v: sb.slice(b.add(v, v), [0], [2], [1]))
    with pytest.raises(BuilderError, match="operand must be a future"):
        b.async_done(x)
    text = SPEC_EXAMPLE.replace('"stablehlo.return"(%1)', '%9 = "stablehlo.abs"(%1) : (tensor<8x8xf32>) -> tensor<8x8xf32>\n'
                                '    "stablehlo.return"(%9)')
    with pytest.raises(HloVerifyError, match="body must hold one op and a return"):
        import_stablehlo(text).verify()
