"""Scale figures of sharded programs: a data-parallel MLP training step on 1, 2 and 4 devices (threads) and on
2 and 4 MPI ranks (one device each), with each device's memory.

    python benchmarks/bench_sharded.py [--batch 2048] [--steps 7] [--markdown]

The same global problem everywhere: ``jax.value_and_grad`` of an MLP's mean squared error (784 -> 512 -> 512
-> 10, tanh), batch split over the devices, parameters replicated (XLA's partitioned program all-reduces the
gradients). Each configuration runs in its own process (the host device count is set before jax starts):
``python bench_sharded.py --worker D threads`` or ``mpiexec -n D python bench_sharded.py --worker D mpi``.
Reported: the median time of a step (after one warm-up), each device's bytes (arguments, results, peak of
live values: ``ShardedExecutable.memory_report``), the largest resident set of a process (``ru_maxrss``:
for MPI the largest rank's), and whether the outputs are bitwise equal to the threaded run of the same
device count and to jax.jit on as many host devices. Timings depend on the machine and its load; not run in
CI. docs/sharded-programs.md quotes a run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def worker(devices: int, backend: str, batch: int, steps: int) -> None:
    """One configuration; prints ``RESULT {json}`` (rank 0 under MPI)."""
    import resource
    import time

    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    jax.config.update("jax_num_cpu_devices", devices)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import interop

    mesh = Mesh(np.array(jax.devices()[:devices]), ("batch",))
    whole, by_batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    rng = np.random.default_rng(0)
    sizes = [784, 512, 512, 10]
    params = [(rng.standard_normal((a, b), np.float32) / np.sqrt(a), np.zeros(b, np.float32))
              for a, b in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((batch, sizes[0]), np.float32)
    y = rng.standard_normal((batch, sizes[-1]), np.float32)

    def loss(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = jnp.tanh(h)
        return jnp.mean((h - y) ** 2)

    step = jax.jit(jax.value_and_grad(loss), in_shardings=(jax.tree.map(lambda _: whole, params), by_batch, by_batch),
                   out_shardings=(whole, jax.tree.map(lambda _: whole, params)))
    exe = interop.compile_sharded(step, params, x, y, backend=backend)
    out = exe(params, x, y)  # warm-up (fusion and loop compilation settle)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        out = exe(params, x, y)
        times.append(time.perf_counter() - start)
    leaves = [np.asarray(a) for a in jax.tree.leaves(out)]
    digest = hashlib.sha256(b"".join(a.tobytes() for a in leaves)).hexdigest()
    ref = [np.asarray(a) for a in jax.tree.leaves(step(params, x, y))]
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rank = 0
    if exe.runner is not None:
        rank = exe.runner.rank
        rss_kib = max(exe.runner.agree(rss_kib, "gathering memory use"))
    if rank != 0:
        return
    report = exe.memory_report()
    print("RESULT " + json.dumps({
        "devices": devices, "backend": backend, "ranks": exe.runner.size if exe.runner is not None else 1,
        "step_ms": sorted(times)[len(times) // 2] * 1e3, "digest": digest,
        "bitwise_jax": all(a.tobytes() == b.tobytes() for a, b in zip(leaves, ref)),
        "max_abs_diff_jax": max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(leaves, ref)),
        "memory": [vars(m) for m in report.devices], "xla": report.xla, "max_rss_mib": rss_kib / 1024,
    }), flush=True)


def run(devices: int, backend: str, batch: int, steps: int) -> dict:
    """One configuration in its own process (under ``mpiexec -n devices`` for MPI)."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", str(devices), backend, "--batch", str(batch),
               "--steps", str(steps)]
    if backend == "mpi":
        mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
        if mpiexec is None:
            raise SystemExit("mpiexec not found: pip install '.[mpi]'")
        command = [mpiexec, "-n", str(devices), *command]
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("XLA_FLAGS", None)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", nargs=2, metavar=("DEVICES", "BACKEND"), help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=2048, help="global batch (default 2048)")
    parser.add_argument("--steps", type=int, default=7, help="timed steps per configuration (median; default 7)")
    parser.add_argument("--markdown", action="store_true", help="print the table as docs/sharded-programs.md shows it")
    args = parser.parse_args()
    if args.worker:
        worker(int(args.worker[0]), args.worker[1], args.batch, args.steps)
        return
    configs = [(1, "threads"), (2, "threads"), (4, "threads"), (2, "mpi"), (4, "mpi")]
    rows = [run(d, b, args.batch, args.steps) for d, b in configs]
    threaded = {r["devices"]: r["digest"] for r in rows if r["backend"] == "threads"}
    base = rows[0]["step_ms"]
    header = ("| devices | run | step (ms) | speed-up | per device: arguments / results / peak live (MiB) | "
              "largest process RSS (MiB) | bitwise: threads / jax.jit |")
    print(f"MLP 784-512-512-10 (tanh), value_and_grad, global batch {args.batch}, f32; median of {args.steps} steps; "
          f"{os.cpu_count()} CPUs")
    print(header)
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        m = r["memory"][0]
        same = "yes" if r["digest"] == threaded[r["devices"]] else "NO"
        run_text = "threads" if r["backend"] == "threads" else f"MPI, {r['ranks']} ranks"
        jax_text = "yes" if r["bitwise_jax"] else f"no (max {r['max_abs_diff_jax']:.1e})"
        print(f"| {r['devices']} | {run_text} | {r['step_ms']:.1f} | {base / r['step_ms']:.2f}x | "
              f"{_mib(m['arguments'])} / {_mib(m['results'])} / {_mib(m['peak'])} | {r['max_rss_mib']:.0f} | "
              f"{same} / {jax_text} |")


if __name__ == "__main__":
    main()
