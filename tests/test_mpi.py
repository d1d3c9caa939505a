"""Sharded programs over MPI ranks (issue 23): ``mpiexec -n 4`` on localhost, bitwise equal to the threaded run.

A job of 4 ranks (one device each) compiles a data-parallel MLP step and shard_maps with psum / all_gather /
ppermute / psum_scatter with ``interop.compile_sharded(..., backend="mpi")``; rank 0 compares every output
with the threaded run of the same program and with jax.jit on 4 host devices, bit for bit. The same job then
makes one rank fail and one rank diverge (run another collective): every rank must raise the same error,
naming the op and the ranks, and the job must go on (no hang). ``xla-run`` runs a serialized export under
``mpiexec -n 2`` (two devices per rank), and a rank that fails on its own (a missing input file) ends the job.

Skipped with its reason where mpiexec or mpi4py is missing (``pip install '.[mpi]'``), except in CI
(``CI=true``), where that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def _mpiexec() -> str:
    """mpiexec (next to this Python first: MPICH's wheel installs it in the environment's bin)."""
    found = shutil.which("mpiexec", path=BIN + os.pathsep + os.environ.get("PATH", ""))
    reason = None
    if found is None:
        reason = "mpiexec not found (pip install '.[mpi]' installs MPICH's)"
    else:
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            reason = "mpi4py not installed (pip install '.[mpi]')"
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the MPI tests must run in CI: {reason}")
        pytest.skip(reason)
    return found


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    return env


def _mpi_run(n: int, *command, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([_mpiexec(), "-n", str(n), *command], capture_output=True, text=True, timeout=timeout,
                          env=_env(), cwd=ROOT)


SCRIPT = r'''
import copy, json, os, sys
os.environ["JAX_PLATFORMS"] = "cpu"
import jax
jax.config.update("jax_num_cpu_devices", 4)
import jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from mpi4py import MPI

import interop
from xla_dialect.errors import ExecutionError

rank = MPI.COMM_WORLD.Get_rank()
devs = jax.devices()
mesh = Mesh(np.array(devs), ("b",))
mesh2 = Mesh(np.array(devs).reshape(2, 2), ("x", "y"))
S = lambda m, *s: NamedSharding(m, P(*s))
rng = np.random.default_rng(0)

def same(a, b):
    a, b = np.ascontiguousarray(np.asarray(a)), np.ascontiguousarray(np.asarray(b))
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()

def sm(body, i=P("b"), o=P("b"), m=mesh):
    return jax.jit(jax.shard_map(body, mesh=m, in_specs=i, out_specs=o, check_vma=False))

def mlp_loss(params, x, y, act=jnp.tanh):
    (w1, b1), (w2, b2) = params
    return jnp.mean((act(x @ w1 + b1) @ w2 + b2 - y) ** 2)

ints = lambda *s: rng.integers(-4, 5, s).astype(np.float32)
normal = lambda *s: rng.standard_normal(s).astype(np.float32)
p_int = [(ints(16, 32), ints(32)), (ints(32, 4), ints(4))]
p_f32 = [(normal(16, 32), normal(32)), (normal(32, 4), normal(4))]
rep = jax.tree.map(lambda _: S(mesh), p_int)
step = jax.jit(jax.value_and_grad(mlp_loss), in_shardings=(rep, S(mesh, "b"), S(mesh, "b")), out_shardings=(S(mesh), rep))
relu_step = jax.jit(jax.value_and_grad(lambda p, x, y: mlp_loss(p, x, y, jax.nn.relu)),
                    in_shardings=(rep, S(mesh, "b"), S(mesh, "b")), out_shardings=(S(mesh), rep))
v = normal(16, 8)
ring = [(i, (i + 1) % 4) for i in range(4)]
programs = {
    # integer-valued floats: every summation order gives the same bits, so jax.jit's are ours
    "mlp_data_parallel_exact": (relu_step, (p_int, ints(64, 16), ints(64, 4))),
    "mlp_data_parallel_f32": (step, (p_f32, normal(64, 16), normal(64, 4))),
    "psum": (sm(lambda a: jax.lax.psum(a, "b"), o=P()), (v,)),
    "all_gather": (sm(lambda a: jax.lax.all_gather(a, "b", tiled=True), o=P()), (v,)),
    "ppermute": (sm(lambda a: jax.lax.ppermute(a, "b", ring)), (v,)),
    "psum_scatter": (sm(lambda a: jax.lax.psum_scatter(a, "b", tiled=True)), (normal(64, 8),)),
    "psum_over_x_of_2x2": (sm(lambda a: jax.lax.psum(a, "x"), i=P("x", "y"), o=P(None, "y"), m=mesh2), (v,)),
    "loop_with_psum": (sm(lambda a: jax.lax.fori_loop(0, 3, lambda i, c: c + jax.lax.psum(c, "b"), a)), (v,)),
}
out = {}
exes = {}
for name, (f, args) in programs.items():
    exe = exes[name] = interop.compile_sharded(f, *args, backend="mpi", timeout=60)
    ours = jax.tree.leaves(exe(*args))
    mine = exe.per_device(*args)
    if rank == 0:
        threaded = copy.copy(exe)
        threaded.runner = None   # the same executable, its devices in threads
        theirs = jax.tree.leaves(threaded(*args))
        ref = jax.tree.leaves(f(*args))
        out[name] = {"vs_threads": [same(a, b) for a, b in zip(ours, theirs)],
                     "vs_jax": [same(a, b) for a, b in zip(ours, ref)],
                     "per_device_vs_threads": all(same(a, b) for r, t in zip(mine, threaded.per_device(*args))
                                                  for a, b in zip(r, t)),
                     "devices": exe.runner.local_devices}

class Failing:
    """Device 2's program on rank 2, raising as a failing kernel would."""
    def __init__(self, inner):
        self.inner = inner
    def __getattr__(self, name):
        return getattr(self.inner, name)
    def __call__(self, *args):
        raise ExecutionError("injected failure of device 2")

def expect_error(name, exe, args):
    try:
        exe(*args)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None

psum = exes["psum"]
original = list(psum.executable.executables)
if rank == 2:
    psum.executable.executables[2] = Failing(original[2])
fail = expect_error("fail", psum, (v,))
psum.executable.executables[:] = original
if rank == 1:  # rank 1 runs all_gather's device program where the others run psum's
    psum.executable.executables[1] = exes["all_gather"].executable.executables[1]
diverge = expect_error("diverge", psum, (v,))
psum.executable.executables[:] = original
after = [same(a, b) for a, b in zip(jax.tree.leaves(psum(v)), jax.tree.leaves(programs["psum"][0](v)))]
errors = MPI.COMM_WORLD.gather({"fail": fail, "diverge": diverge, "after": after}, root=0)
if rank == 0:
    out["errors"] = errors
    print("RESULT " + json.dumps(out), flush=True)
'''


@pytest.fixture(scope="module")
def four_ranks():
    """The 4-rank job's JSON (rank 0's comparisons and every rank's errors)."""
    done = _mpi_run(4, sys.executable, "-c", SCRIPT)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert done.returncode == 0 and line is not None, (done.stdout[-2000:], done.stderr[-4000:])
    return json.loads(line[len("RESULT "):])


PROGRAMS = ["mlp_data_parallel_exact", "mlp_data_parallel_f32", "psum", "all_gather", "ppermute", "psum_scatter",
            "psum_over_x_of_2x2", "loop_with_psum"]
# Bitwise to jax.jit where the executor's one-device arithmetic is: not the f32 MLP (its matmuls, see
# tests/test_sharded_programs.py); its MPI run is still bitwise equal to the threaded one.
NOT_BITWISE_TO_JAX = {"mlp_data_parallel_f32"}


@pytest.mark.parametrize("name", PROGRAMS)
def test_four_ranks_bitwise_equal_to_threads_and_jax(four_ranks, name):
    r = four_ranks[name]
    assert r["devices"] == [0], r  # rank 0 runs device 0 only
    assert all(r["vs_threads"]) and r["per_device_vs_threads"], r
    if name not in NOT_BITWISE_TO_JAX:
        assert all(r["vs_jax"]), r


def test_failing_rank_fails_every_rank_naming_it(four_ranks):
    errors = four_ranks["errors"]
    messages = {e["fail"] for e in errors}
    assert len(messages) == 1, messages  # the same error on every rank
    (message,) = messages
    assert message.startswith("ExecutionError: device 2 (replica 0, partition 2) on rank 2: injected failure"), message
    assert "also failed: devices [0, 1, 3] on ranks [0, 1, 3]" in message, message


def test_diverging_rank_names_the_ops_and_ranks(four_ranks):
    errors = four_ranks["errors"]
    messages = {e["diverge"] for e in errors}
    assert len(messages) == 1, messages
    (message,) = messages
    assert message.startswith("CollectiveMismatchError: hlo.all_reduce"), message
    assert "on rank 0 is at execution 1 of hlo.all_reduce" in message, message
    assert "on rank 1 sent its operands of execution 1 of hlo.all_gather" in message, message
    assert all(all(e["after"]) for e in errors)  # the job goes on: the next call is right again


def _xla_run(*args) -> list[str]:
    exe = os.path.join(BIN, "xla-run")
    return [exe, *args] if os.path.exists(exe) else [sys.executable, "-m", "interop.tools.cli", *args]


EXPORT = r'''
import os, sys
os.environ["JAX_PLATFORMS"] = "cpu"
import jax
jax.config.update("jax_num_cpu_devices", 4)
import jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("data", "model"))
S = lambda *s: NamedSharding(mesh, P(*s))
loss = lambda w, x, y: jnp.mean((jnp.maximum(x @ w, 0) - y) ** 2)
step = jax.jit(jax.value_and_grad(loss), in_shardings=(S(None, "model"), S("data"), S("data", "model")))
rng = np.random.default_rng(1)
w, x, y = (rng.integers(-4, 5, s).astype(np.float32) for s in [(8, 4), (32, 8), (32, 4)])
folder = sys.argv[1]
open(os.path.join(folder, "step.export"), "wb").write(jax.export.export(step)(w, x, y).serialize())
np.savez(os.path.join(folder, "in.npz"), arg0=w, arg1=x, arg2=y)
value, grad = step(w, x, y)
np.savez(os.path.join(folder, "ref.npz"), result0=np.asarray(value), result1=np.asarray(grad))
import interop  # XLA's partitioned per-device HLO text, and jax.jit's shard of each output on each device
exe = interop.compile_sharded(step, w, x, y)
open(os.path.join(folder, "step.hlo"), "w").write(exe.hlo_text)
shards = {}
for i, out in enumerate((value, grad)):
    held = {s.device: np.asarray(s.data) for s in out.addressable_shards}
    shards.update({f"result{i}.device{d}": held[dev] for d, dev in enumerate(exe.devices)})
np.savez(os.path.join(folder, "ref_shards.npz"), **shards)
# The same program as StableHLO text (sdy shardings), and a shard_map's as an export's portable bytecode
open(os.path.join(folder, "step.mlir"), "w").write(step.lower(w, x, y).as_text())
ring = Mesh(np.array(jax.devices()), ("i",))
sm = jax.jit(jax.shard_map(lambda a: jax.lax.psum(jnp.sin(a), "i") * a, mesh=ring, in_specs=P("i"), out_specs=P("i")))
a = np.linspace(-2, 2, 16, dtype=np.float32)
open(os.path.join(folder, "sm.mlirbc"), "wb").write(bytes(jax.export.export(sm)(a).mlir_module_serialized))
np.savez(os.path.join(folder, "sm_in.npz"), arg0=a)
np.savez(os.path.join(folder, "sm_ref.npz"), result0=np.asarray(sm(a)))
'''


@pytest.fixture(scope="module")
def export_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mpi_export")
    done = subprocess.run([sys.executable, "-c", EXPORT, str(folder)], capture_output=True, text=True, timeout=120,
                          env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def test_xla_run_of_a_sharded_export_over_two_ranks(export_files):
    f = export_files
    done = _mpi_run(2, *_xla_run(str(f / "step.export"), "--inputs", str(f / "in.npz"), "--output",
                                 str(f / "out.npz"), "--memory"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 replicas x 4 partitions, 4 devices on 2 MPI ranks" in done.stdout, done.stdout
    assert done.stdout.count("result #0") == 1  # rank 0 prints, the other does not
    assert "device 3:" in done.stdout, done.stdout  # the memory report
    ours, ref = np.load(f / "out.npz"), np.load(f / "ref.npz")
    assert sorted(ours.files) == ["result0", "result1"]
    for k in ref.files:
        assert ours[k].tobytes() == ref[k].tobytes(), k


def _same_shards(out_path, ref_shards) -> None:
    """Every device's result in ``out_path`` (``result{i}`` if the same on all, else ``result{i}.device{d}``) is
    jax.jit's shard on that device, bit for bit."""
    ours = np.load(out_path)
    for key in ref_shards.files:
        name, device = key.split(".")
        got = ours[name] if name in ours.files else ours[key]
        assert got.dtype == ref_shards[key].dtype and got.tobytes() == ref_shards[key].tobytes(), key


def test_xla_run_of_partitioned_hlo_text_threads_and_mpi(export_files):
    f = export_files
    ref = np.load(f / "ref_shards.npz")
    done = subprocess.run(_xla_run(str(f / "step.hlo"), "--inputs", str(f / "in.npz"), "--output",
                                   str(f / "hlo_threads.npz")), capture_output=True, text=True, timeout=120,
                          env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 replicas x 4 partitions, 4 devices (threads)" in done.stdout, done.stdout
    _same_shards(f / "hlo_threads.npz", ref)
    done = _mpi_run(4, *_xla_run(str(f / "step.hlo"), "--inputs", str(f / "in.npz"), "--output",
                                 str(f / "hlo_mpi.npz")))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 devices on 4 MPI ranks" in done.stdout, done.stdout
    _same_shards(f / "hlo_mpi.npz", ref)


def test_xla_run_of_sharded_stablehlo_text_and_bytecode_threads_and_mpi(export_files):
    # StableHLO of several devices (mhlo.num_partitions = 4: jit with shardings, a shard_map's
    # sdy.manual_computation) is partitioned by XLA (jaxlib compiles it for 4 host devices) and runs as its HLO
    # text does; the results are whole, assembled by the output shardings, bitwise jax.jit's.
    f = export_files
    runs = [("step.mlir", "in.npz", "ref.npz", None), ("sm.mlirbc", "sm_in.npz", "sm_ref.npz", None),
            ("sm.mlirbc", "sm_in.npz", "sm_ref.npz", 2)]
    for k, (program, inputs, reference, ranks) in enumerate(runs):
        command = _xla_run(str(f / program), "--inputs", str(f / inputs), "--output", str(f / f"shlo{k}.npz"))
        done = (_mpi_run(ranks, *command) if ranks else
                subprocess.run(command, capture_output=True, text=True, timeout=120, env=_env()))
        assert done.returncode == 0, done.stderr[-3000:]
        where = f"4 devices on {ranks} MPI ranks" if ranks else "4 devices (threads)"
        assert f"1 replicas x 4 partitions, {where}" in done.stdout, done.stdout
        assert "its devices' shards assembled" in done.stdout, done.stdout
        ours, ref = np.load(f / f"shlo{k}.npz"), np.load(f / reference)
        assert sorted(ours.files) == sorted(ref.files), program
        for key in ref.files:
            assert ours[key].shape == ref[key].shape and ours[key].tobytes() == ref[key].tobytes(), (program, key)


def test_shards_are_assembled_by_their_sharding_and_replicas_must_agree():
    from interop.tools.sharded_cli import assemble_result
    from xla_dialect.errors import XlaError

    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    tiles = [a[:2, :4], a[:2, 4:], a[2:, :4], a[2:, 4:]]
    assert assemble_result(tiles, "{devices=[2,2]<=[4]}", 4, "r").tobytes() == a.tobytes()
    # devices 0/1 and 2/3 replicate rows 0:2 and 2:4 (the last tile dimension replicates)
    halves = [a[:2], a[:2], a[2:], a[2:]]
    assert assemble_result(halves, "{devices=[2,1,2]<=[4] last_tile_dim_replicate}", 4, "r").tobytes() == a.tobytes()
    assert assemble_result([a] * 4, "{replicated}", 4, "r").tobytes() == a.tobytes()
    with pytest.raises(XlaError, match="devices 0 and 1 hold the same tile"):
        assemble_result([a[:2], a[2:], a[2:], a[2:]], "{devices=[2,1,2]<=[4] last_tile_dim_replicate}", 4, "r")


def test_hlo_shardings_split_whole_values():
    from interop.tools.sharded_cli import parse_sharding, split_argument

    assert parse_sharding("{replicated}") is None
    tiles, ids = parse_sharding("{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}")
    assert tiles == [2, 1] and ids.tolist() == [[[0, 2]], [[1, 3]]]
    tiles, ids = parse_sharding("{devices=[2,2]0,2,1,3}")
    assert tiles == [2, 2] and ids.tolist() == [[0, 2], [1, 3]]
    a = np.arange(32).reshape(4, 8)
    s = parse_sharding("{devices=[2,2]<=[4]}")
    assert split_argument(a, (2, 4), s, 1, "arg0").tolist() == a[:2, 4:].tolist()
    assert split_argument(a, (2, 4), s, 2, "arg0").tolist() == a[2:, :4].tolist()
    assert split_argument(a[:2, :4], (2, 4), s, 3, "arg0").tolist() == a[:2, :4].tolist()  # a shard: as is
    with pytest.raises(Exception, match=r"arg0: shape \[4, 6\]; each device takes \[2, 4\]"):
        split_argument(np.zeros((4, 6)), (2, 4), s, 0, "arg0")


def test_rank_failing_on_its_own_ends_the_job(export_files):
    f = export_files
    script = (f'if [ "$PMI_RANK" = 1 ]; then I={f}/missing.npz; else I={f}/in.npz; fi; '
              f'exec {" ".join(_xla_run(str(f / "step.export")))} --inputs "$I"')
    done = _mpi_run(2, "sh", "-c", script, timeout=90)
    assert done.returncode != 0
    assert f"xla-run: rank 1: error: --inputs {f}/missing.npz: no such file" in done.stderr, done.stderr
    assert "ending every rank of the job (MPI_Abort)" in done.stderr, done.stderr


SILENT_RANK = r'''
import sys, time
import numpy as np
import lowering
from interop import import_hlo
from lowering.executor.mpi import MpiDeviceExecutable

module = import_hlo("""HloModule m, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[4] parameter(0)
  ROOT r = f32[4] all-reduce(p), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add
}
""")
exe = MpiDeviceExecutable(lowering.compile(module, num_partitions=2), timeout=2)
if exe.rank == 1:
    time.sleep(4)  # a rank that does not come (hung, or busy elsewhere)
start = time.monotonic()
try:
    exe([np.ones(4, np.float32)], [np.ones(4, np.float32)])
    print(f"rank {exe.rank}: no error", flush=True)
except Exception as e:
    print(f"rank {exe.rank}: after {time.monotonic() - start:.1f} s: {type(e).__name__}: {e}", flush=True)
'''


def test_rank_never_heard_from_times_out():
    done = _mpi_run(2, sys.executable, "-c", SILENT_RANK, timeout=60)
    lines = sorted(ln for ln in done.stdout.splitlines() if ln.startswith("rank "))
    assert len(lines) == 2, (done.stdout, done.stderr[-2000:])
    assert lines[0].startswith("rank 0: after 2."), lines
    assert "ExecutionError: the start of the run: rank 0 heard nothing from ranks [1] within 2 s" in lines[0], lines
    assert "no error" not in lines[1], lines  # the late rank fails too (its peer has gone)
