"""Collectives: builder, shape inference, verifier, round trip, and multi-device execution vs XLA.

Ground truth runs in one subprocess (``JAX_SCRIPT``), because the device count
must be set (``XLA_FLAGS=--xla_force_host_platform_device_count=8``) before jax
is imported and conftest.py has imported it already:

* partition cases: jax.jit of shard_map programs (psum, pmax, all_gather,
  all_to_all, ppermute, psum_scatter, axis_index) on 8 devices, as 1-D and
  2-D meshes; ours are the equivalent builder programs compiled with
  ``num_partitions=8`` (channel_id=1, use_global_device_ids, flattened ids), as
  jax lowers them;
* pmap cases: jax.pmap of the same functions against builder programs
  without channels compiled with ``num_replicas=8`` (this jax lowers pmap
  through shard_map, so XLA itself runs partitions there);
* replica cases: our builder programs, written out as StableHLO text and
  compiled by XLA's CPU client with ``num_replicas=N`` (no channel: groups
  of replica ids), against ours compiled with ``num_replicas=N``: XLA running
  replica programs, with replica groups of any order and size.

XLA CPU implements neither collective_broadcast nor programs with several
partitions that are not SPMD-partitioned; those cases (and
cross_replica_and_partition groups) are checked against XLA's operation semantics' and the
StableHLO spec's examples and hand-computed values.
"""

import json
import os
import subprocess
import sys
import time

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import func

import lowering
from helpers import assert_close, random_array
from lowering.runtime.devices import CollectiveMismatchError
from xla_dialect import XlaBuilder, parse_module
from xla_dialect.errors import BuilderError, ExecutionError, HloVerifyError
from xla_dialect.types import element_type_from_dtype

BF16 = np.dtype(ml_dtypes.bfloat16)
D = 8
ALL8 = [list(range(8))]
GLOBAL = dict(channel_id=1, use_global_device_ids=True)  # what shard_map lowers to
B_GROUPS = [[0, 1, 2, 3], [4, 5, 6, 7]]  # mesh (a=2, b=4): collectives over 'b'
A_GROUPS = [[0, 4], [1, 5], [2, 6], [3, 7]]  # ... over 'a'


def add(a, b):
    return a.builder.add(a, b)


def mul(a, b):
    return a.builder.mul(a, b)


def max_(a, b):
    return a.builder.max(a, b)


def min_(a, b):
    return a.builder.min(a, b)


def shape_text(dtype, shape) -> str:
    return f"{element_type_from_dtype(dtype).xla_name}[{','.join(map(str, shape))}]"


def program(dtype, shape, fn, params: int = 1):
    """A module of ``fn(b, *params)`` over parameters of one type."""
    b = XlaBuilder("c")
    xs = [b.parameter(i, shape_text(dtype, shape)) for i in range(params)]
    root = fn(b, *xs)
    return b.build(list(root) if isinstance(root, (list, tuple)) else root)


def run(module, per_device, **grid):
    """Compile for the grid and run with one argument list per device."""
    return lowering.compile(module, **grid)(*per_device)


def s32(b, x):
    return b.convert_element_type(x, "s32")


# ----------------------------------------------------------------------------
# Partition cases: shard_map programs on jax, builder programs here
# ----------------------------------------------------------------------------

def _loop(b, x):
    """fori_loop(0, 3, lambda i, c: c + psum(c)): an all_reduce executed three times."""
    state = b.tuple([b.constant(np.int32(0)), x])

    def cond(s):
        bb = s.builder
        return bb.lt(bb.get_tuple_element(s, 0), bb.constant(np.int32(3)))

    def body(s):
        bb = s.builder
        i, c = bb.get_tuple_element(s, 0), bb.get_tuple_element(s, 1)
        return bb.tuple([bb.add(i, bb.constant(np.int32(1))), bb.add(c, bb.all_reduce(c, add, ALL8, **GLOBAL))])

    return b.get_tuple_element(b.while_(cond, body, state), 1)


PARTITION_FUNCTIONS = {
    # name: (mesh, builder program)
    "psum": ("x", lambda b, x: b.all_reduce(x, add, ALL8, **GLOBAL)),
    "pmax": ("x", lambda b, x: b.all_reduce(x, max_, ALL8, **GLOBAL)),
    "pmin": ("x", lambda b, x: b.all_reduce(x, min_, ALL8, **GLOBAL)),
    "psum_pair": ("x", lambda b, x: b.all_reduce([x, b.mul(x, x)], add, ALL8, **GLOBAL)),
    "all_gather0": ("x", lambda b, x: b.all_gather(x, 0, replica_groups=ALL8, **GLOBAL)),
    "all_gather1": ("x", lambda b, x: b.all_gather(x, 1, replica_groups=ALL8, **GLOBAL)),
    "all_gather_untiled": ("x", lambda b, x: b.all_gather(b.reshape(x, [1, *x.dims]), 0, replica_groups=ALL8,
                                                          **GLOBAL)),
    "ppermute_cycle": ("x", lambda b, x: b.collective_permute(x, [(i, (i + 1) % 8) for i in range(8)], 1)),
    "ppermute_partial": ("x", lambda b, x: b.collective_permute(x, [(0, 3), (5, 1), (6, 6)], 1)),
    "all_to_all": ("x", lambda b, x: b.all_to_all(x, 0, 1, 8, ALL8, channel_id=1)),
    "psum_scatter": ("x", lambda b, x: b.reduce_scatter(x, add, 0, replica_groups=ALL8, **GLOBAL)),
    "axis_index": ("x", lambda b, x: s32(b, b.partition_id())),
    "loop": ("x", _loop),
    "psum_b": ("ab", lambda b, x: b.all_reduce(x, add, B_GROUPS, **GLOBAL)),
    "psum_a": ("ab", lambda b, x: b.all_reduce(x, add, A_GROUPS, **GLOBAL)),
    "all_gather_a": ("ab", lambda b, x: b.all_gather(x, 0, replica_groups=A_GROUPS, **GLOBAL)),
    "ppermute_b": ("ab", lambda b, x: b.collective_permute(
        x, [(g * 4 + i, g * 4 + (i + 1) % 4) for g in range(2) for i in range(4)], 1)),
    "all_to_all_b": ("ab", lambda b, x: b.all_to_all(x, 0, 0, 4, B_GROUPS, channel_id=1)),
    "psum_scatter_a": ("ab", lambda b, x: b.reduce_scatter(x, add, 0, replica_groups=A_GROUPS, **GLOBAL)),
    "axis_index_a": ("ab", lambda b, x: s32(b, b.div(b.partition_id(), b.constant(np.uint32(4))))),
    "axis_index_b": ("ab", lambda b, x: s32(b, b.rem(b.partition_id(), b.constant(np.uint32(4))))),
}

PARTITION_CASES = [
    # (function, dtype, local shape, special values)
    ("psum", np.float32, (3, 2), False),
    ("psum", np.float64, (5,), True),
    ("psum", np.int32, (4, 3), False),
    ("psum", np.uint8, (7,), False),
    ("psum", BF16, (6,), False),
    ("psum", np.complex64, (2, 2), False),
    ("psum", np.float16, (5,), False),
    ("psum", np.dtype(ml_dtypes.float8_e5m2), (4,), False),
    ("pmax", np.dtype(ml_dtypes.float8_e4m3fn), (4,), True),
    ("pmin", np.float64, (3,), True),
    ("all_gather0", np.dtype(ml_dtypes.int4), (3,), False),
    ("ppermute_cycle", np.complex128, (2,), False),
    ("pmax", np.float32, (4, 4), True),
    ("pmax", np.int64, (3,), False),
    ("pmin", BF16, (5,), True),
    ("pmin", np.int8, (5,), False),
    ("psum_pair", np.float32, (2, 3), False),
    ("all_gather0", np.float32, (2, 3), False),
    ("all_gather0", np.bool_, (3,), False),
    ("all_gather0", np.int16, (2, 0), False),
    ("all_gather1", np.float64, (2, 3), False),
    ("all_gather_untiled", np.int32, (2,), False),
    ("ppermute_cycle", np.float32, (2, 2), True),
    ("ppermute_cycle", np.bool_, (4,), False),
    ("ppermute_partial", np.int32, (3,), False),
    ("all_to_all", np.float32, (8, 3), False),
    ("all_to_all", np.int64, (16, 1), False),
    ("psum_scatter", np.float32, (16, 2), False),
    ("psum_scatter", np.int32, (8,), False),
    ("axis_index", np.float32, (1,), False),
    ("loop", np.float32, (2,), False),
    ("psum_b", np.float32, (4, 2), False),
    ("psum_a", np.int32, (4, 2), False),
    ("all_gather_a", np.float32, (2, 3), False),
    ("ppermute_b", np.float32, (3,), False),
    ("all_to_all_b", np.float32, (4, 2), False),
    ("psum_scatter_a", np.float32, (4, 3), False),
    ("axis_index_a", np.float32, (1,), False),
    ("axis_index_b", np.float32, (1,), False),
]


PMAP_CASES = [
    # jax.pmap (axis "x") of a function above vs the builder program on 8 replicas, without channels
    ("psum", np.float32, (3,), lambda b, x: b.all_reduce(x, add)),
    ("pmax", np.float64, (2, 2), lambda b, x: b.all_reduce(x, max_)),
    ("all_gather0", np.int32, (2,), lambda b, x: b.all_gather(x, 0, 8)),
    ("ppermute_cycle", np.float32, (2,), lambda b, x: b.collective_permute(x, [(i, (i + 1) % 8) for i in range(8)])),
    ("all_to_all", np.float32, (8, 2), lambda b, x: b.all_to_all(x, 0, 1, 8)),
    ("psum_scatter", np.int64, (8,), lambda b, x: b.reduce_scatter(x, add, 0, 8)),
    ("axis_index", np.float32, (1,), lambda b, x: s32(b, b.replica_id())),
]


def _pmap_key(case) -> str:
    return f"pmap__{case[0]}__{np.dtype(case[1]).name}"


def _partition_key(case) -> str:
    fn, dtype, shape, special = case
    return f"{fn}__{np.dtype(dtype).name}__{'x'.join(map(str, shape))}{'__special' if special else ''}"


# ----------------------------------------------------------------------------
# Replica cases: builder programs, run by XLA as StableHLO with num_replicas=N
# ----------------------------------------------------------------------------

REPLICA_CASES = [
    # (key, replicas, dtype, local shape, special, builder program)
    ("all_reduce_ragged", 4, np.float32, (3,), False, lambda b, x: b.all_reduce(x, add, [[0, 1, 3], [2]])),
    ("all_reduce_ragged_s32", 4, np.int32, (2, 2), False, lambda b, x: b.all_reduce(x, add, [[2, 0], [3], [1]])),
    ("all_reduce_all_mul", 4, np.float64, (4,), False, lambda b, x: b.all_reduce(x, mul)),
    ("all_reduce_mul_bf16", 4, BF16, (8,), False, lambda b, x: b.all_reduce(x, mul)),
    ("all_reduce_mul_f16", 4, np.float16, (8,), False, lambda b, x: b.all_reduce(x, mul)),
    ("all_reduce_min_special", 4, np.float32, (6,), True, lambda b, x: b.all_reduce(x, min_, [[0, 1, 2, 3]])),
    ("all_reduce_singletons_max", 4, np.float32, (6,), True, lambda b, x: b.all_reduce(x, max_, [[0], [1], [2], [3]])),
    ("all_reduce_singletons_sum", 2, np.float32, (6,), True, lambda b, x: b.all_reduce(x, add, [[1], [0]])),
    ("all_reduce_pairs", 8, np.int64, (3,), False, lambda b, x: b.all_reduce(x, max_, [[0, 2, 4, 6], [1, 3, 5, 7]])),
    ("all_reduce_variadic", 2, np.int64, (4,), False, lambda b, x: b.all_reduce([x, b.neg(x)], add, [[0, 1]])),
    ("cross_replica_sum", 4, np.float32, (2,), False, lambda b, x: b.cross_replica_sum(x, [[0, 1], [2, 3]])),
    ("all_gather_groups", 4, np.float32, (2, 3), False, lambda b, x: b.all_gather(x, 1, replica_groups=[[3, 0],
                                                                                                      [1, 2]])),
    ("all_gather_all", 4, np.uint16, (2,), False, lambda b, x: b.all_gather(x, 0, 4)),
    ("all_to_all_groups", 4, np.float32, (2, 4), False, lambda b, x: b.all_to_all(x, 1, 0, 2, [[2, 1], [0, 3]])),
    # (XLA CPU crashes with SIGFPE on an all_to_all with empty replica_groups: the operation semantics example test covers it.)
    ("all_to_all_4", 4, np.int32, (4, 2), False, lambda b, x: b.all_to_all(x, 0, 1, 4, [[0, 1, 2, 3]])),
    ("reduce_scatter_max", 4, np.float32, (8, 2), False, lambda b, x: b.reduce_scatter(x, max_, 0,
                                                                                        replica_groups=[[1, 0, 3, 2]])),
    ("reduce_scatter_groups", 4, np.int32, (2, 4), False, lambda b, x: b.reduce_scatter(x, add, 1, replica_groups=[
        [3, 1], [0, 2]])),
    ("collective_permute", 4, np.float32, (3,), False, lambda b, x: b.collective_permute(x, [[0, 1], [1, 3]])),
    ("collective_permute_swap", 2, np.bool_, (2, 2), False, lambda b, x: b.collective_permute(x, [[0, 1], [1, 0]])),
    ("replica_id", 4, np.float32, (1,), False, lambda b, x: b.replica_id()),
]


def _tensor_text(t) -> str:
    from interop.stablehlo.exporter import stablehlo_type

    return stablehlo_type(t)


def stablehlo_text(module, replicas: int) -> str:
    """StableHLO of a test program of collectives on its parameters (the forms XLA takes)."""
    main = next(op for op in module.ops if isinstance(op, func.FuncOp))
    names = {}
    lines = []
    for i, a in enumerate(main.body.block.args):
        names[a] = f"%arg{i}"
    for n, op in enumerate(main.body.block.ops):
        if op.name == "func.return":
            lines.append(f"    return {', '.join(names[v] for v in op.operands)} : "
                         f"{', '.join(_tensor_text(v.type) for v in op.operands)}")
            break
        results = [f"%v{n}_{i}" for i in range(len(op.results))]
        names.update(zip(op.results, results))
        attrs = []
        for key, value in op.properties.items():
            if key == "channel_id":
                attrs.append(f"channel_handle = #stablehlo.channel_handle<handle = {value.value.data}, type = 1>")
            elif key == "use_global_device_ids":
                attrs.append(key)
            elif hasattr(value, "value"):
                attrs.append(f"{key} = {value.value.data} : i64")
            else:
                attrs.append(f"{key} = {value}")
        region = ""
        if op.regions:
            body = list(op.regions[0].block.ops)[0]
            t = _tensor_text(op.regions[0].block.args[0].type)
            region = (f" ({{\n    ^bb0(%a: {t}, %b: {t}):\n      %s = \"stablehlo.{body.name[4:]}\"(%a, %b) : "
                      f"({t}, {t}) -> {t}\n      \"stablehlo.return\"(%s) : ({t}) -> ()\n    }})")
        ins = ", ".join(names[v] for v in op.operands)
        lhs = (f"{results[0].split('_')[0]}:{len(results)}" if len(results) > 1 else results[0])
        for i, r in enumerate(results):
            names[op.results[i]] = f"{lhs.split(':')[0]}#{i}" if len(results) > 1 else r
        props = f" <{{{', '.join(attrs)}}}>" if attrs else ""
        lines.append(f"    {lhs} = \"stablehlo.{op.name[4:]}\"({ins}){props}{region} : "
                     f"({', '.join(_tensor_text(v.type) for v in op.operands)}) -> "
                     f"({', '.join(_tensor_text(r.type) for r in op.results)})")
    ins = ", ".join(f"%arg{i}: {_tensor_text(a.type)}" for i, a in enumerate(main.body.block.args))
    outs = ", ".join(_tensor_text(t) for t in main.function_type.outputs)
    return (f"module @m attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = {replicas} : i32}} {{\n"
            f"  func.func public @main({ins}) -> ({outs}) {{\n" + "\n".join(lines) + "\n  }\n}\n")


# ----------------------------------------------------------------------------
# The jax/XLA side (a subprocess)
# ----------------------------------------------------------------------------

JAX_SCRIPT = r'''
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"
import ml_dtypes
import numpy as np
import jax
jax.config.update("jax_enable_x64", True)
from jax import lax, shard_map
from jax.extend import backend as jex_backend
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

work = sys.argv[1]
cases = json.load(open(os.path.join(work, "cases.json")))
inputs = {k: v.view(np.dtype(getattr(ml_dtypes, cases["dtypes"][k], cases["dtypes"][k])))
          for k, v in np.load(os.path.join(work, "inputs.npz")).items()}
devices = jax.devices()[:8]
MESHES = {"x": (Mesh(np.array(devices), ("x",)), P("x")),
          "ab": (Mesh(np.array(devices).reshape(2, 4), ("a", "b")), P(("a", "b")))}
cycle = [(i, (i + 1) % 8) for i in range(8)]
FUNCTIONS = {
    "psum": lambda x: lax.psum(x, "x"),
    "pmax": lambda x: lax.pmax(x, "x"),
    "pmin": lambda x: lax.pmin(x, "x"),
    "psum_pair": lambda x: lax.psum((x, x * x), "x"),
    "all_gather0": lambda x: lax.all_gather(x, "x", axis=0, tiled=True),
    "all_gather1": lambda x: lax.all_gather(x, "x", axis=1, tiled=True),
    "all_gather_untiled": lambda x: lax.all_gather(x, "x", axis=0),
    "ppermute_cycle": lambda x: lax.ppermute(x, "x", cycle),
    "ppermute_partial": lambda x: lax.ppermute(x, "x", [(0, 3), (5, 1), (6, 6)]),
    "all_to_all": lambda x: lax.all_to_all(x, "x", 0, 1, tiled=True),
    "psum_scatter": lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True),
    "axis_index": lambda x: lax.axis_index("x"),
    "loop": lambda x: lax.fori_loop(0, 3, lambda i, c: c + lax.psum(c, "x"), x),
    "psum_b": lambda x: lax.psum(x, "b"),
    "psum_a": lambda x: lax.psum(x, "a"),
    "all_gather_a": lambda x: lax.all_gather(x, "a", axis=0, tiled=True),
    "ppermute_b": lambda x: lax.ppermute(x, "b", [(i, (i + 1) % 4) for i in range(4)]),
    "all_to_all_b": lambda x: lax.all_to_all(x, "b", 0, 0, tiled=True),
    "psum_scatter_a": lambda x: lax.psum_scatter(x, "a", scatter_dimension=0, tiled=True),
    "axis_index_a": lambda x: lax.axis_index("a"),
    "axis_index_b": lambda x: lax.axis_index("b"),
}
out, errors = {}, {}
for case in cases["partition"]:
    key, name, mesh_name = case["key"], case["function"], case["mesh"]
    try:
        mesh, spec = MESHES[mesh_name]
        fn = FUNCTIONS[name]
        def per_device(x, fn=fn):
            r = fn(x)
            r = r if isinstance(r, tuple) else (r,)
            return tuple(v[None] for v in r)
        local = inputs[key]
        glob = local.reshape((local.shape[0] * local.shape[1],) + local.shape[2:]) if local.ndim > 1 else local
        glob = jax.device_put(glob, NamedSharding(mesh, spec))
        f = jax.jit(shard_map(per_device, mesh=mesh, in_specs=spec, out_specs=spec))
        for i, r in enumerate(f(glob)):
            out[f"{key}__{i}"] = np.asarray(r)
    except Exception as e:
        errors[key] = f"{type(e).__name__}: {e}"
for case in cases["pmap"]:
    key, fn = case["key"], FUNCTIONS[case["function"]]
    try:
        r = jax.pmap(fn, axis_name="x", devices=devices)(inputs[key])
        for i, v in enumerate(r if isinstance(r, tuple) else (r,)):
            out[f"{key}__{i}"] = np.asarray(v)
    except Exception as e:
        errors[key] = f"{type(e).__name__}: {e}"
client = jex_backend.get_backend("cpu")
for case in cases["replica"]:
    key, n = case["key"], case["replicas"]
    try:
        options = jex_backend.get_compile_options(num_replicas=n, num_partitions=1)
        exe = client.compile_and_load(case["text"], devices[:n], options)
        local = inputs[key]
        mesh = Mesh(np.array(devices[:n]), ("r",))
        shards = [jax.device_put(local[d], devices[d]) for d in range(n)]
        arg = jax.make_array_from_single_device_arrays((n * local.shape[1],) + local.shape[2:],
                                                       NamedSharding(mesh, P("r")), shards)
        results = exe.execute_sharded([arg]).disassemble_into_single_device_arrays()
        for i, per_dev in enumerate(results):
            out[f"{key}__{i}"] = np.stack([np.asarray(a) for a in per_dev])
    except Exception as e:
        errors[key] = f"{type(e).__name__}: {e}"
errors["__dtypes__"] = {k: v.dtype.name for k, v in out.items()}
np.savez(os.path.join(work, "outputs.npz"), **{k: v if hasattr(np, v.dtype.name) else v.view(f"u{v.dtype.itemsize}")
                                               for k, v in out.items()})
json.dump(errors, open(os.path.join(work, "errors.json"), "w"))
'''


def _bits(a: np.ndarray) -> np.ndarray:
    return a if hasattr(np, a.dtype.name) else a.view(f"u{a.dtype.itemsize}")


def _inputs(key, devices, dtype, shape, special):
    rng = np.random.default_rng(sum(key.encode()))
    return random_array(rng, (devices, *shape), dtype, special)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Run every partition and replica case on jax/XLA (8 host devices) in one subprocess."""
    work = tmp_path_factory.mktemp("collectives")
    inputs, cases = {}, {"partition": [], "replica": [], "pmap": []}
    for case in PARTITION_CASES:
        key = _partition_key(case)
        fn, dtype, shape, special = case
        inputs[key] = _inputs(key, D, dtype, shape, special)
        cases["partition"].append({"key": key, "function": fn, "mesh": PARTITION_FUNCTIONS[fn][0]})
    for case in PMAP_CASES:
        key = _pmap_key(case)
        inputs[key] = _inputs(key, D, case[1], case[2], False)
        cases["pmap"].append({"key": key, "function": case[0]})
    for key, n, dtype, shape, special, build in REPLICA_CASES:
        inputs[key] = _inputs(key, n, dtype, shape, special)
        cases["replica"].append({"key": key, "replicas": n, "text": stablehlo_text(program(dtype, shape, build), n)})
    # npz cannot hold ml_dtypes arrays: store their bits, and the dtype names.
    cases["dtypes"] = {k: v.dtype.name for k, v in inputs.items()}
    np.savez(work / "inputs.npz", **{k: _bits(v) for k, v in inputs.items()})
    (work / "cases.json").write_text(json.dumps(cases))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, "-c", JAX_SCRIPT, str(work)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = json.loads((work / "errors.json").read_text())
    dtypes = errors.pop("__dtypes__")
    outputs = {k: v.view(np.dtype(getattr(ml_dtypes, dtypes[k], dtypes[k]))) for k, v in
               np.load(work / "outputs.npz").items()}
    return inputs, outputs, errors


def _compare(ours, outputs, key, devices, max_ulp=0):
    for d in range(devices):
        for i, r in enumerate(ours[d]):
            expected = outputs[f"{key}__{i}"][d]
            assert_close(r, expected, max_ulp=max_ulp, err_msg=f"{key} device {d} result {i}")
    assert f"{key}__{len(ours[0])}" not in outputs, f"{key}: jax has more results"


@pytest.mark.parametrize("case", PARTITION_CASES, ids=_partition_key)
@pytest.mark.sample(16)
def test_partitions_match_shard_map(reference, case):
    inputs, outputs, errors = reference
    key = _partition_key(case)
    assert key not in errors, errors.get(key)
    fn, dtype, shape, _ = case
    module = program(dtype, shape, PARTITION_FUNCTIONS[fn][1])
    ours = run(module, [[x] for x in inputs[key]], num_partitions=D)
    # Bit-exact: floats are reduced in XLA CPU's order and precision.
    _compare(ours, outputs, key, D)


@pytest.mark.parametrize("case", REPLICA_CASES, ids=[c[0] for c in REPLICA_CASES])
def test_replicas_match_xla(reference, case):
    inputs, outputs, errors = reference
    key, n, dtype, shape, _, build = case
    assert key not in errors, errors.get(key)
    ours = run(program(dtype, shape, build), [[x] for x in inputs[key]], num_replicas=n)
    _compare(ours, outputs, key, n)


@pytest.mark.parametrize("case", PMAP_CASES, ids=_pmap_key)
def test_replicas_match_pmap(reference, case):
    inputs, outputs, errors = reference
    key = _pmap_key(case)
    assert key not in errors, errors.get(key)
    _, dtype, shape, build = case
    ours = run(program(dtype, shape, build), [[x] for x in inputs[key]], num_replicas=D)
    _compare(ours, outputs, key, D)


def test_replica_groups_equal_flattened_partition_groups(reference):
    """A program without channel on 8 replicas equals the shard_map program on 8 partitions."""
    inputs, outputs, _ = reference
    key = _partition_key(("psum_b", np.float32, (4, 2), False))
    module = program(np.float32, (4, 2), lambda b, x: b.all_reduce(x, add, B_GROUPS))
    ours = run(module, [[x] for x in inputs[key]], num_replicas=D)
    _compare(ours, outputs, key, D)


# ----------------------------------------------------------------------------
# Examples of XLA's operation semantics and the StableHLO spec; grid modes XLA CPU cannot run
# ----------------------------------------------------------------------------


def test_seed_examples():
    f = np.float32
    two = [[np.array([1.0, 2.5], f)], [np.array([3.0, 5.25], f)]]
    (r0,), (r1,) = run(program(f, (2,), lambda b, x: b.all_gather(x, 0, 2)), two, num_replicas=2)
    assert r0.tolist() == r1.tolist() == [1.0, 2.5, 3.0, 5.25]
    (r0,), (r1,) = run(program(f, (2,), lambda b, x: b.cross_replica_sum(x)), two, num_replicas=2)
    assert r0.tolist() == r1.tolist() == [4.0, 7.75]
    two = [[np.array([1.0, 2.25], f)], [np.array([3.0, 5.25], f)]]
    (r0,), (r1,) = run(program(f, (2,), lambda b, x: b.reduce_scatter(x, add, 0, 2)), two, num_replicas=2)
    assert r0.tolist() == [4.0] and r1.tolist() == [7.5]
    # AllToAll: f32[4,16] split along 1 into 4 parts, concatenated along 0: f32[16,4].
    module = program(f, (4, 16), lambda b, x: b.all_to_all(x, 1, 0, 4))
    assert module.body.block.first_op.function_type.outputs.data[0].get_shape() == (16, 4)
    xs = [np.arange(64, dtype=f).reshape(4, 16) + 100 * d for d in range(4)]
    out = run(module, [[x] for x in xs], num_replicas=4)
    for j in range(4):
        np.testing.assert_array_equal(out[j][0], np.concatenate([x[:, 4 * j:4 * j + 4] for x in xs], axis=0))
    # ReplicaId: a u32 scalar, a different value on each replica.
    out = run(program(f, (1,), lambda b, x: b.replica_id()), [[np.zeros(1, f)]] * 3, num_replicas=3)
    assert [(o[0].dtype, int(o[0])) for o in out] == [(np.uint32, 0), (np.uint32, 1), (np.uint32, 2)]


def test_stablehlo_spec_examples():
    i64 = np.int64
    # all_gather, variadic, 2 replicas.
    a = [np.array([[1, 2], [3, 4]], i64), np.array([[5, 6], [7, 8]], i64)]
    c = [np.array([[11, 12], [13, 14]], i64), np.array([[15, 16], [17, 18]], i64)]
    module = program(i64, (2, 2), lambda b, x, y: b.all_gather([x, y], 1, replica_groups=[[0, 1]]), params=2)
    out = run(module, [[a[0], c[0]], [a[1], c[1]]], num_replicas=2)
    for d in range(2):
        assert out[d][0].tolist() == [[1, 2, 5, 6], [3, 4, 7, 8]]
        assert out[d][1].tolist() == [[11, 12, 15, 16], [13, 14, 17, 18]]
    # all_reduce, variadic.
    xs = [np.array([1, 2, 3, 4], i64), np.array([5, 6, 7, 8], i64)]
    ys = [np.array([9, 10, 11, 12], i64), np.array([13, 14, 15, 16], i64)]
    module = program(i64, (4,), lambda b, x, y: b.all_reduce([x, y], add, [[0, 1]]), params=2)
    out = run(module, [[xs[0], ys[0]], [xs[1], ys[1]]], num_replicas=2)
    for d in range(2):
        assert out[d][0].tolist() == [6, 8, 10, 12] and out[d][1].tolist() == [22, 24, 26, 28]
    # all_to_all, variadic.
    x = [np.array([[1, 2, 3, 4], [5, 6, 7, 8]], i64), np.array([[9, 10, 11, 12], [13, 14, 15, 16]], i64)]
    y = [v + 16 for v in x]
    module = program(i64, (2, 4), lambda b, p, q: b.all_to_all([p, q], 1, 0, 2, [[0, 1]]), params=2)
    out = run(module, [[x[0], y[0]], [x[1], y[1]]], num_replicas=2)
    assert out[0][0].tolist() == [[1, 2], [5, 6], [9, 10], [13, 14]]
    assert out[1][0].tolist() == [[3, 4], [7, 8], [11, 12], [15, 16]]
    assert out[0][1].tolist() == [[17, 18], [21, 22], [25, 26], [29, 30]]
    assert out[1][1].tolist() == [[19, 20], [23, 24], [27, 28], [31, 32]]
    # collective_broadcast: groups [[2, 1]] of 4 replicas; 0 and 3 are in no group and get zeros.
    xs = [np.array([[1, 2]], i64), np.array([[3, 4]], i64), np.array([[5, 6]], i64), np.array([[7, 8]], i64)]
    out = run(program(i64, (1, 2), lambda b, x: b.collective_broadcast(x, [[2, 1]])), [[v] for v in xs],
              num_replicas=4)
    assert [o[0].tolist() for o in out] == [[[0, 0]], [[5, 6]], [[5, 6]], [[0, 0]]]
    # collective_permute over 3 replicas.
    xs = [np.array([[1, 2], [3, 4]], i64), np.array([[5, 6], [7, 8]], i64), np.array([[9, 10], [11, 12]], i64)]
    out = run(program(i64, (2, 2), lambda b, x: b.collective_permute(x, [[0, 1], [1, 2]])), [[v] for v in xs],
              num_replicas=3)
    assert [o[0].tolist() for o in out] == [[[0, 0], [0, 0]], [[1, 2], [3, 4]], [[5, 6], [7, 8]]]
    # reduce_scatter.
    xs = [np.array([[1, 2, 3, 4], [5, 6, 7, 8]], i64), np.array([[9, 10, 11, 12], [13, 14, 15, 16]], i64)]
    out = run(program(i64, (2, 4), lambda b, x: b.reduce_scatter(x, add, 1, replica_groups=[[0, 1]])),
              [[v] for v in xs], num_replicas=2)
    assert out[0][0].tolist() == [[10, 12], [18, 20]] and out[1][0].tolist() == [[14, 16], [22, 24]]


def _device_ids(b, x):
    """This device's flattened id as an s32[1] (replica * num_partitions + partition)."""
    r, p = s32(b, b.replica_id()), s32(b, b.partition_id())
    return b.reshape(b.add(b.mul(r, b.constant(np.int32(2))), p), [1])


def test_group_modes_on_replicas_x_partitions():
    """2 replicas x 2 partitions: the four process-group strategies of the StableHLO spec."""
    f = np.float32
    args = [[np.zeros(1, f)]] * 4

    def gathered(**kw):
        module = program(f, (1,), lambda b, x: b.all_gather(_device_ids(b, x), 0, **kw))
        return [o[0].tolist() for o in run(module, args, num_replicas=2, num_partitions=2)]

    # cross_replica: groups of replica ids, one per partition.
    assert gathered(shard_count=2) == [[0, 2], [1, 3], [0, 2], [1, 3]]
    # cross_replica_and_partition: replica group x every partition, partition-major (the result
    # shape needs the group size: shard_count).
    assert gathered(replica_groups=[[1, 0]], channel_id=5, shard_count=4) == [[2, 0, 3, 1]] * 4
    assert gathered(replica_groups=[[0], [1]], channel_id=5, shard_count=2) == [[0, 1], [0, 1], [2, 3], [2, 3]]
    # flattened ids.
    assert gathered(replica_groups=[[3, 0], [2, 1]], **GLOBAL) == [[3, 0], [2, 1], [2, 1], [3, 0]]
    # cross_partition (all_to_all with a channel): groups of partition ids, one per replica.
    module = program(f, (1,), lambda b, x: b.all_to_all(b.broadcast(_device_ids(b, x), [2]), 0, 1, 2,
                                                         [[1, 0]], channel_id=1))
    out = [o[0].tolist() for o in run(module, args, num_replicas=2, num_partitions=2)]
    assert out == [[[1, 0]], [[1, 0]], [[3, 2]], [[3, 2]]]
    # collective_permute with a channel: pairs of partition ids within each replica.
    module = program(f, (1,), lambda b, x: b.collective_permute(_device_ids(b, x), [[0, 1]], channel_id=1))
    out = [o[0].tolist() for o in run(module, args, num_replicas=2, num_partitions=2)]
    assert out == [[0], [0], [0], [2]]
    # reduce_scatter across replicas and partitions: member i of [0, 2, 1, 3] keeps block i.
    module = program(f, (4,), lambda b, x: b.reduce_scatter(x, add, 0, 4, [[0, 1]], channel_id=2))
    xs = [[np.arange(4, dtype=f) * (d + 1)] for d in range(4)]  # the sum is 10 * [0, 1, 2, 3]
    out = [o[0].tolist() for o in run(module, xs, num_replicas=2, num_partitions=2)]
    assert out == [[0.0], [20.0], [10.0], [30.0]]
    # collective_broadcast across partitions: partition 1 of each replica sends to both.
    module = program(f, (1,), lambda b, x: b.collective_broadcast(_device_ids(b, x), [[1, 0]], channel_id=1))
    out = [o[0].tolist() for o in run(module, args, num_replicas=2, num_partitions=2)]
    assert out == [[1], [1], [3], [3]]
    # replica_id / partition_id.
    module = program(f, (1,), lambda b, x: [b.replica_id(), b.partition_id()])
    out = [(int(r), int(p)) for r, p in run(module, args, num_replicas=2, num_partitions=2)]
    assert out == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_any_reduction_computation_folds_in_group_order():
    """A non-commutative computation (a - b... as 2a + b) is folded left to right over the group order."""
    f = np.float64
    module = program(f, (2,), lambda b, x: b.all_reduce(x, lambda p, q: p.builder.add(p.builder.add(p, p), q),
                                                        [[2, 0, 1]]))
    xs = [np.array([1.0, 10.0]) * (d + 1) for d in range(3)]  # device d holds (d + 1) * [1, 10]
    out = run(module, [[v] for v in xs], num_replicas=3)
    # order 2, 0, 1: acc = x2 = 3; acc = 2*3 + 1 = 7; acc = 2*7 + 2 = 16
    for o in out:
        assert o[0].tolist() == [16.0, 160.0]
    # A computation with a shape-dependent op (not element-wise): per-element fallback, same values.
    module = program(f, (2,), lambda b, x: b.all_reduce(
        x, lambda p, q: p.builder.reshape(p.builder.add(p.builder.reshape(p, [1]), p.builder.reshape(q, [1])), []),
        [[0, 1, 2]]))
    out = run(module, [[v] for v in xs], num_replicas=3)
    assert all(o[0].tolist() == [6.0, 60.0] for o in out)


def test_tuple_operands_give_tuple_results():
    b = XlaBuilder("t")
    x = b.parameter(0, "f32[2]")
    y = b.parameter(1, "s32[3]")
    t = b.tuple([x, x])
    summed = b.all_reduce(t, add)
    assert str(summed.type).startswith("tuple<")
    gathered = b.all_gather([x, y], 0, 2)
    assert isinstance(gathered, tuple) and gathered[1].dims == (6,)
    module = b.build([b.get_tuple_element(summed, 1), gathered[1]])
    out = run(module, [[np.ones(2, np.float32), np.arange(3, dtype=np.int32)]] * 2, num_replicas=2)
    assert out[0][0].tolist() == [2.0, 2.0] and out[1][1].tolist() == [0, 1, 2, 0, 1, 2]


def test_single_device_is_plain_execution():
    """Without a grid: replica_id is a constant 0 and a collective of one device is its operand."""
    b = XlaBuilder("one")
    x = b.parameter(0, "f32[3]")
    module = b.build([b.replica_id(), b.partition_id(), b.all_reduce(x, add), b.all_gather(x, 0, 1),
                      b.collective_permute(x, [[0, 0]]), b.all_to_all(x, 0, 0, 1)])
    exe = lowering.compile(module)
    assert isinstance(exe, lowering.Executable)
    assert "hlo.replica_id" in exe.source and "= c" in exe.source.split("hlo.replica_id")[0].splitlines()[-1]
    v = np.array([1.0, -0.0, np.nan], np.float32)
    rid, pid, *rest = exe(v)
    assert rid.dtype == np.uint32 and int(rid) == 0 and int(pid) == 0
    for r in rest:
        assert_close(r, v)
        assert np.signbit(r).tolist() == [False, True, False]
        assert not np.shares_memory(r, v)
    # XLA removes a single-device all_reduce: NaN stays (a run of several devices with
    # singleton groups reduces from the identity instead; see the replica cases).
    (r,) = lowering.compile(program(np.float32, (3,), lambda b, x: b.all_reduce(x, max_)))(v)
    assert np.isnan(r[2]) and np.signbit(r[1])
    (r,) = lowering.compile(program(np.float32, (3,), lambda b, x: b.collective_permute(x, [])))(v)
    assert r.tolist() == [0, 0, 0]


def test_results_do_not_alias_across_devices():
    module = program(np.float32, (3,), lambda b, x: [b.collective_permute(x, [[0, 1], [1, 0]]),
                                                     b.all_reduce(x, lambda p, q: q),
                                                     b.collective_broadcast(x, [[0, 1]])])
    xs = [np.arange(3, dtype=np.float32), np.arange(3, dtype=np.float32) + 10]
    out = run(module, [[v] for v in xs], num_replicas=2)
    arrays = [a for o in out for a in o] + xs
    for i, a in enumerate(arrays):
        for c in arrays[i + 1:]:
            assert not np.shares_memory(a, c)
    assert out[0][1].tolist() == out[1][1].tolist() == [10.0, 11.0, 12.0]


# ----------------------------------------------------------------------------
# Errors: mismatched collectives never hang
# ----------------------------------------------------------------------------


def _only_replica_zero(collective):
    """A program where replica 0 runs ``collective`` inside a conditional and the others do not."""
    b = XlaBuilder("mismatch")
    x = b.parameter(0, "f32[2]")
    is_zero = b.eq(b.replica_id(), b.constant(np.uint32(0)))
    r = b.conditional(is_zero, x, lambda v: collective(v.builder, v), x, lambda v: v)
    return b.build(r)


@pytest.mark.parametrize("collective, name", [
    (lambda b, v: b.all_reduce(v, add), "hlo.all_reduce"),
    (lambda b, v: b.all_gather(b.slice(v, [0], [1], [1]), 0, 2), "hlo.all_gather"),
    (lambda b, v: b.collective_permute(v, [[1, 0]]), "hlo.collective_permute"),
])
def test_mismatched_collective_is_reported(collective, name):
    exe = lowering.compile(_only_replica_zero(collective), num_replicas=2)
    start = time.monotonic()
    with pytest.raises(CollectiveMismatchError, match=rf"{name}.*device 1 \(replica 1, partition 0\) never "
                                                      rf"arrived \(finished\)"):
        exe([np.ones(2, np.float32)], [np.ones(2, np.float32)])
    assert time.monotonic() - start < 5
    assert isinstance(CollectiveMismatchError("x"), ExecutionError)


def test_different_collectives_and_trip_counts_are_reported():
    # Replica 0 waits at an all_reduce, replica 1 at an all_gather: both never complete.
    b = XlaBuilder("crossed")
    x = b.parameter(0, "f32[2]")
    is_zero = b.eq(b.replica_id(), b.constant(np.uint32(0)))
    r = b.conditional(is_zero, x, lambda v: v.builder.all_reduce(v, add), x,
                      lambda v: v.builder.slice(v.builder.all_gather(v, 0, 2), [0], [2], [1]))
    exe = lowering.compile(b.build(r), num_replicas=2)
    with pytest.raises(CollectiveMismatchError, match=r"^device 0 .*hlo.all_reduce.*device 1 \(replica 1, "
                                                      r"partition 0\) never arrived \(waiting at hlo.all_gather"):
        exe([np.ones(2, np.float32)], [np.ones(2, np.float32)])
    # A loop whose trip count is the replica id: replica 1 executes its all_reduce once more.
    b = XlaBuilder("trips")
    x = b.parameter(0, "f32[2]")
    limit = s32(b, b.replica_id())
    state = b.tuple([b.constant(np.int32(-1)), x])

    def cond(s):
        return s.builder.le(s.builder.get_tuple_element(s, 0), limit)

    def body(s):
        bb = s.builder
        return bb.tuple([bb.add(bb.get_tuple_element(s, 0), bb.constant(np.int32(1))),
                         bb.all_reduce(bb.get_tuple_element(s, 1), add)])

    exe = lowering.compile(b.build(b.get_tuple_element(b.while_(cond, body, state), 1)), num_replicas=2)
    with pytest.raises(CollectiveMismatchError, match="hlo.all_reduce.*device 0 .* never arrived \\(finished\\)"):
        exe([np.ones(2, np.float32)], [np.ones(2, np.float32)])


def test_a_failing_device_is_the_reported_cause():
    exe = lowering.compile(program(np.float32, (2,), lambda b, x: b.all_reduce(x, add)), num_replicas=2)
    with pytest.raises(ExecutionError, match=r"^device 1 \(replica 1, partition 0\): @main argument #0") as e:
        exe([np.ones(2, np.float32)], [np.ones(3, np.float32)])
    assert not isinstance(e.value, CollectiveMismatchError)
    with pytest.raises(ExecutionError, match="give one argument list per device, got 1"):
        exe([np.ones(2, np.float32)])
    with pytest.raises(ExecutionError, match="must be a list or tuple"):
        exe(np.ones(2, np.float32), np.ones(2, np.float32))


def test_timeout_bounds_a_wait():
    # A device stuck in a long computation is not a deadlock; the optional timeout is the last resort.
    exe = lowering.compile(program(np.float32, (2,), lambda b, x: b.all_reduce(x, add)), num_replicas=2)
    exe.timeout = 0.05
    real = exe.executable

    class Slow:
        def __getattr__(self, name):
            return getattr(real, name)

        def __call__(self, *args):
            if int(np.asarray(args[0])[0]) == 1:
                time.sleep(0.5)
            return real(*args)

    exe.executables = [Slow()] * 2
    with pytest.raises(CollectiveMismatchError, match="timed out after 0.05 s"):
        exe([np.zeros(2, np.float32)], [np.ones(2, np.float32)])


def test_repeated_runs_and_many_collectives():
    """Ten chained collectives in a loop of 20 iterations on 8 devices, run twice: no cross-talk."""
    def step(b, c):
        for _ in range(5):
            c = b.all_reduce(c, add, B_GROUPS)
            c = b.div(c, b.constant(np.float32(4)))
            c = b.collective_permute(c, [(i, (i + 3) % 8) for i in range(8)])
        return c

    def fn(b, x):
        state = b.tuple([b.constant(np.int32(0)), x])
        return b.get_tuple_element(b.while_(
            lambda s: s.builder.lt(s.builder.get_tuple_element(s, 0), s.builder.constant(np.int32(20))),
            lambda s: s.builder.tuple([s.builder.add(s.builder.get_tuple_element(s, 0),
                                                     s.builder.constant(np.int32(1))),
                                       step(s.builder, s.builder.get_tuple_element(s, 1))]), state), 1)

    exe = lowering.compile(program(np.float32, (16,), fn), num_replicas=8)
    xs = [[np.full(16, d, np.float32)] for d in range(8)]
    first = exe(*xs)
    second = exe(*xs)
    for a, c in zip(first, second):
        np.testing.assert_array_equal(a[0], c[0])
    # Averages within groups of 4 then rotations: the total over all devices is conserved.
    assert np.isclose(sum(float(o[0][0]) for o in first), sum(range(8)))


# ----------------------------------------------------------------------------
# Builder, verifier, compile-time checks, round trip
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("fn, message", [
    (lambda b, x: b.all_gather(x, 2, 4), "all_gather_dim 2 is out of range for operand #0 of rank 2"),
    (lambda b, x: b.all_gather(x, 0), "shard_count is needed when replica_groups is empty"),
    (lambda b, x: b.all_gather(x, 0, 3, [[0, 1], [2, 3]]), "shard_count 3 must equal the size of each replica"),
    (lambda b, x: b.all_gather(x, 0, replica_groups=[[0, 1], [2]]), "replica_groups .* must all have the same size"),
    (lambda b, x: b.all_reduce(x, add, [[0, 1], [1, 2]]), "contain id 1 more than once"),
    (lambda b, x: b.all_reduce(x, add, [[0, -2]]), "id -2 is negative"),
    (lambda b, x: b.all_reduce(x, add, use_global_device_ids=True), "use_global_device_ids needs a channel_id > 0"),
    (lambda b, x: b.all_reduce(x, lambda p, q: p.builder.convert_element_type(p, "f64")),
     "computation returns \\(f64\\[\\]\\) but must return \\(f32\\[\\]\\)"),
    (lambda b, x: b.all_reduce([x, b.convert_element_type(x, "s32")], add),
     "operands must share one element type"),
    (lambda b, x: b.all_to_all(x, 0, 1, 3), "dimension 0 \\(size 4\\) is not divisible by split_count 3"),
    (lambda b, x: b.all_to_all(x, 0, 1, 0), "split_count must be positive"),
    (lambda b, x: b.all_to_all(x, 0, 1, 2, [[0, 1, 2, 3]]), "split_count 2 must equal the size of each replica"),
    (lambda b, x: b.all_to_all(x, 0, 5, 2), "concat_dimension 5 is out of range"),
    (lambda b, x: b.reduce_scatter(x, add, 1, 4), "dimension 1 \\(size 6\\) is not divisible by the shard count 4"),
    (lambda b, x: b.reduce_scatter(x, add, -1, 2), "scatter_dimension -1 is out of range"),
    (lambda b, x: b.collective_permute(x, [[0, 1], [2, 1]]), "name a target more than once"),
    (lambda b, x: b.collective_permute(x, [[0, 1], [0, 2]]), "name a source more than once"),
    (lambda b, x: b.collective_permute(x, [[0, 1, 2]]), "must be \\(source, target\\) pairs"),
    (lambda b, x: b.all_reduce(b.tuple([x, b.tuple([x])]), add), "operand #1 must be an array"),
    (lambda b, x: b.all_gather(x, 0, replica_groups=[[0, 1]], channel_id=1),
     "shard_count is needed with a channel_id and no use_global_device_ids"),
    (lambda b, x: b.all_gather(x, 0, 3, [[0, 1]], channel_id=1),
     "shard count 3 of the result types must be a multiple of the replica group size 2"),
    (lambda b, x: b.reduce_scatter(x, add, 0, 2, [[0, 1], [1, 2]]), "contain id 1 more than once"),
])
def test_builder_errors(fn, message):
    b = XlaBuilder("bad")
    x = b.parameter(0, "f32[4,6]")
    with pytest.raises(BuilderError, match=message):
        fn(b, x)


@pytest.mark.parametrize("fn, grid, message", [
    (lambda b, x: b.all_reduce(x, add, [[0, 1]]), dict(num_replicas=4), "must hold every replica id 0..3 once; "
                                                                         "missing \\[2, 3\\]"),
    (lambda b, x: b.all_reduce(x, add, [[0, 4]]), dict(num_replicas=2), "replica id 4 .* out of range for 2"),
    (lambda b, x: b.all_gather(x, 0, 4), dict(num_replicas=2), "the shard count of the result shape 4 does not "
                                                               "match the process groups of 2 devices"),
    (lambda b, x: b.all_to_all(x, 0, 0, 2), dict(num_replicas=4), "split_count 2 does not match"),
    (lambda b, x: b.all_reduce(x, add, channel_id=1, use_global_device_ids=True), dict(num_partitions=2),
     "use_global_device_ids needs explicit replica_groups"),
    (lambda b, x: b.collective_permute(x, [[0, 2]], channel_id=1), dict(num_replicas=4, num_partitions=2),
     "partition ids outside \\[0, 2\\)"),
    (lambda b, x: b.all_reduce(x, add, [[0, 1]]), dict(), "replica id 1 .* out of range for 1"),
])
def test_compile_checks_groups_against_the_grid(fn, grid, message):
    module = program(np.float32, (4, 6), fn)
    with pytest.raises(HloVerifyError, match=message):
        lowering.compile(module, **grid)


def test_compile_arguments():
    module = program(np.float32, (2,), lambda b, x: b.all_reduce(x, add))
    with pytest.raises(ExecutionError, match="num_replicas must be a positive int, got 0"):
        lowering.compile(module, num_replicas=0)
    exe = lowering.compile(module, num_replicas=2, num_partitions=3)
    assert (exe.num_replicas, exe.num_partitions, exe.num_devices) == (2, 3, 6)
    assert "hlo.all_reduce" in exe.source


def _text(op, operands, props, result, region=""):
    return (f'builtin.module {{\n  func.func @main(%0: {operands}) -> {result} {{\n'
            f'    %1 = "{op}"(%0) <{props}> ({region}) : ({operands}) -> {result}\n'
            f'    func.return %1 : {result}\n  }}\n}}')


ADD_REGION = ('{\n    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n      %s = hlo.add %a, %b : (tensor<f32>, tensor<f32>) '
              '-> tensor<f32>\n      hlo.return %s : tensor<f32>\n    }')


def test_verifier_rejects_bad_ir():
    groups = "replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>"
    ok = _text("hlo.all_gather", "tensor<2x3xf32>", f"{{all_gather_dim = 1 : i64, {groups}}}", "tensor<2x6xf32>")
    parse_module(ok)
    with pytest.raises(HloVerifyError, match="shape inference gives f32\\[2,6\\]"):
        parse_module(ok.replace("tensor<2x6xf32>", "tensor<4x3xf32>"))
    # Without groups the result carries the shard count; it must be one whole factor.
    parse_module(ok.replace("dense<[[0, 1]]> : tensor<1x2xi64>", "dense<> : tensor<0x0xi64>")
                 .replace("tensor<2x6xf32>", "tensor<2x12xf32>"))
    with pytest.raises(HloVerifyError, match="dimension 1 must be multiplied by the shard count"):
        parse_module(ok.replace("dense<[[0, 1]]> : tensor<1x2xi64>", "dense<> : tensor<0x0xi64>")
                     .replace("tensor<2x6xf32>", "tensor<2x7xf32>"))
    with pytest.raises(HloVerifyError, match="must have type tensor<RxCxi64>"):
        parse_module(ok.replace("tensor<1x2xi64>", "tensor<1x2xi32>"))
    with pytest.raises(HloVerifyError, match="may only be padded with -1 at its end"):
        parse_module(_text("hlo.all_reduce", "tensor<2xf32>",
                           "{replica_groups = dense<[[-1, 1]]> : tensor<1x2xi64>}", "tensor<2xf32>", ADD_REGION))
    with pytest.raises(HloVerifyError, match="must have 2 columns"):
        parse_module(_text("hlo.collective_permute", "tensor<2xf32>",
                           "{source_target_pairs = dense<[[0, 1, 2]]> : tensor<1x3xi64>}", "tensor<2xf32>"))
    with pytest.raises(HloVerifyError, match="shape inference gives u32\\[\\]"):
        parse_module('builtin.module {\n  func.func @main() -> tensor<i32> {\n    %0 = hlo.replica_id : tensor<i32>\n'
                     '    func.return %0 : tensor<i32>\n  }\n}')


def test_round_trip():
    b = XlaBuilder("rt")
    x = b.parameter(0, "f32[4,2]")
    y = b.all_reduce(x, add, [[0, 1, 3], [2]], channel_id=3)
    z = b.all_gather(x, 0, 4)
    w = b.all_to_all([x, y], 0, 1, 2, [[0, 1], [2, 3]])
    r = b.reduce_scatter(x, max_, 0, replica_groups=[[0, 1, 2, 3]], channel_id=2, use_global_device_ids=True)
    p = b.collective_permute(x, [])
    c = b.collective_broadcast(x, [[1, 0]])
    module = b.build([y, z, *w, r, p, c, b.replica_id(), b.partition_id()])
    text = str(module)
    assert "dense<[[0, 1, 3], [2, -1, -1]]> : tensor<2x3xi64>" in text
    assert "source_target_pairs = dense<> : tensor<0x2xi64>" in text
    again = parse_module(text)
    assert str(again) == text
    # And it runs on 4 replicas (groups of 4 flattened ids: 1 partition).
    xs = [[np.full((4, 2), d, np.float32)] for d in range(4)]
    out = lowering.compile(again, num_replicas=4)(*xs)
    assert [o[0][0, 0] for o in out] == [4.0, 4.0, 2.0, 4.0]
    assert all(not o[5].any() for o in out)  # collective_permute with no pairs: zeros


# ----------------------------------------------------------------------------
# collective_reduce and dynamic roots (the current StableHLO spec)
# ----------------------------------------------------------------------------


def test_collective_reduce_spec_example():
    # The spec's example: 4 replicas in one group; the root (first member) gets the sum, the others zeros.
    exe = lowering.compile(program(np.int64, (1, 2), lambda b, x: b.collective_reduce(x, add, [[0, 1, 2, 3]])),
                           num_replicas=4)
    outs = exe(*[[np.array([[1 + 2 * i, 2 + 2 * i]], np.int64)] for i in range(4)])
    assert [o[0].tolist() for o in outs] == [[[16, 20]], [[0, 0]], [[0, 0]], [[0, 0]]]


def test_collective_reduce_dynamic_root_groups_and_outsiders():
    def build(b, x):
        root = b.constant(np.array([1, 0], np.int32))
        return b.collective_reduce([x, b.mul(x, x)], add, [[2, 0]], root=root)

    exe = lowering.compile(program(np.float32, (3,), build), num_replicas=3)
    xs = [np.full(3, 1.0 + d, np.float32) for d in range(3)]
    (a0, b0), (a1, b1), (a2, b2) = exe(*[[x] for x in xs])
    # group [2, 0]: operand 0 goes to member 1 (device 0), operand 1 to member 0 (device 2); device 1 is in
    # no group and gets zeros
    np.testing.assert_array_equal(a0, xs[2] + xs[0])
    np.testing.assert_array_equal(b2, xs[2] ** 2 + xs[0] ** 2)
    for z in (b0, a2, a1, b1):
        np.testing.assert_array_equal(z, np.zeros(3, np.float32))


def test_collective_broadcast_dynamic_root_and_single_device():
    def build(b, x):
        return b.collective_broadcast(x, [[0, 1]], root=b.constant(np.array([1], np.int32)))

    exe = lowering.compile(program(np.int64, (1, 2), build), num_replicas=2)
    outs = exe([np.array([[1, 2]])], [np.array([[3, 4]])])
    assert [o[0].tolist() for o in outs] == [[[3, 4]], [[3, 4]]]
    one = lowering.compile(program(np.int64, (2,), lambda b, x: b.collective_reduce(
        x, add, [[0]], root=b.constant(np.array([0], np.int32)))))
    np.testing.assert_array_equal(one(np.array([5, 6]))[0], [5, 6])


def test_dynamic_root_errors():
    with pytest.raises(BuilderError, match=r"root operand must be s32\[2\]"):
        program(np.int64, (2,), lambda b, x: b.collective_reduce(
            [x, x], add, [[0, 1]], root=b.constant(np.array([0], np.int32))))
    exe = lowering.compile(program(np.int64, (2,), lambda b, x: b.collective_broadcast(
        x, [[0, 1]], root=b.constant(np.array([5], np.int32)))), num_replicas=2)
    with pytest.raises(ExecutionError, match="root 5 is not an index into the process group of 2 devices"):
        exe([np.array([1, 2])], [np.array([3, 4])])
