"""A training loop sharded over a 2x2 mesh of host devices, run as XLA partitions it.

The batch is split over the mesh's ``data`` axis and the MLP's hidden layer over its ``model`` axis (data and
tensor parallelism). ``interop.compile_sharded`` hands the jitted step to jaxlib, imports XLA's partitioned
per-device program and runs it on 4 devices, one thread each; every step is compared with jax.jit on the same
4 host devices, and the shards each device holds are printed.

    python examples/sharded_training.py
    mpiexec -n 4 python -m mpi4py examples/sharded_training.py   # 4 devices on 4 MPI ranks (pip install '.[mpi]')

Under ``mpiexec`` (``backend="auto"``) every rank runs this script, compiles the same program and runs its own
device; every rank gets the global results (the same bits as the threaded run), rank 0 prints.
"""

from __future__ import annotations

import os
import sys

if "jax" not in sys.modules:  # the host CPU as 4 devices; must be set before jax starts
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import interop  # noqa: E402


def loss(params, x, y):
    w1, w2 = params
    return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)


def make_step(mesh):
    by = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731
    params = (by(None, "model"), by("model", None))  # hidden units split over "model"
    batch = by("data", None)  # examples split over "data"

    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return value, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    return jax.jit(step, in_shardings=(params, batch, batch), out_shardings=(by(), params))


def main(steps: int = 3) -> float:
    """Run ``steps`` training steps on the executor and jax.jit side by side; the largest difference."""
    if len(jax.devices()) < 4:
        raise SystemExit("needs 4 devices: run with XLA_FLAGS=--xla_force_host_platform_device_count=4")
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "model"))
    rng = np.random.default_rng(0)
    params = (rng.standard_normal((16, 32), np.float32) * 0.3, rng.standard_normal((32, 4), np.float32) * 0.3)
    x, y = rng.standard_normal((64, 16), np.float32), rng.standard_normal((64, 4), np.float32)
    step = make_step(mesh)
    exe = interop.compile_sharded(step, params, x, y, backend="auto")  # MPI when started by mpiexec -n 4
    quiet = exe.runner is not None and exe.runner.rank != 0  # under MPI, rank 0 prints
    say = (lambda *args: None) if quiet else print
    say(exe, "collectives:", sorted(set(op for op in ("all-reduce", "all-gather", "reduce-scatter",
                                                          "collective-permute", "all-to-all")
                                          if f" {op}(" in exe.hlo_text)))
    shards = exe.per_device(params, x, y)
    for device, outputs in zip(exe.devices, shards):
        say(f"  {device}: loss {outputs[0].shape}, w1 shard {outputs[1].shape}, w2 shard {outputs[2].shape}")
    ours, theirs, worst = params, params, 0.0
    for i in range(steps):
        value, ours = exe(ours, x, y)
        ref_value, theirs = step(theirs, x, y)
        diffs = [float(np.max(np.abs(a - np.asarray(b)))) for a, b in zip(jax.tree.leaves((value, ours)),
                                                                          jax.tree.leaves((ref_value, theirs)))]
        worst = max(worst, *diffs)
        say(f"step {i}: loss {float(value):.6f} (jax.jit {float(ref_value):.6f}), largest difference {max(diffs):.2e}")
    return worst


if __name__ == "__main__":
    main()
