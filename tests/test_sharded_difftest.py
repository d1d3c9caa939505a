"""difftest and the pytest plugin accept sharded functions (issue 23): ``difftest(fn, x, sharded=True)`` runs XLA's
partitioned program on the executor's devices and compares it with the function on as many host devices;
``--difftest-devices N`` gives a pytest session N host devices. In subprocesses: the device count is set before
jax starts its backend, which this process has done."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import json_from_jax_subprocess

pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r'''
import json, os
import jax
jax.config.update("jax_num_cpu_devices", 4)
import jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import interop
from interop.jax.difftest import difftest

mesh = Mesh(np.array(jax.devices()), ("b",))
rng = np.random.default_rng(0)
v = rng.standard_normal((16, 8)).astype(np.float32)
psum = jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "b"), mesh=mesh, in_specs=P("b"), out_specs=P()))
S = lambda *s: NamedSharding(mesh, P(*s))
loss = lambda w, x: jnp.mean(jnp.tanh(x @ w) ** 2)
step = jax.jit(jax.value_and_grad(loss), in_shardings=(S(), S("b")))
w, x = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((32, 8)).astype(np.float32)
out = {}
r = difftest(psum, v, sharded=True, exact=True)
out["psum"] = {"ok": r.ok, "exact": r.exact, "text": str(r)}
r = difftest(step, w, x, sharded=True)
out["step"] = {"ok": r.ok, "outputs": len(r.outputs), "text": str(r)}
wrong = jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "b") + 1e-3 * jax.lax.axis_index("b"), mesh=mesh,
                              in_specs=P("b"), out_specs=P("b")))
r = difftest(wrong, v, sharded=True)
out["per_device_values"] = {"ok": r.ok, "text": str(r)}
print("RESULT " + json.dumps(out))
'''


@pytest.fixture(scope="module")
def results():
    return json_from_jax_subprocess(SCRIPT)


def test_difftest_of_sharded_functions(results):
    assert results["psum"]["ok"] and all(results["psum"]["exact"]), results["psum"]["text"]
    assert "sharded: 1 replicas x 4 partitions" in results["psum"]["text"], results["psum"]["text"]
    assert results["step"]["ok"] and results["step"]["outputs"] == 2, results["step"]["text"]
    # each device's shard of a per-device output is compared: the executor gives every device its own value
    assert results["per_device_values"]["ok"], results["per_device_values"]["text"]


PLUGIN_TEST = r'''
import jax, numpy as np
from jax.sharding import Mesh, PartitionSpec as P

def test_psum_on_four_devices(difftest):
    assert len(jax.devices()) == 4
    mesh = Mesh(np.array(jax.devices()), ("b",))
    f = jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "b"), mesh=mesh, in_specs=P("b"), out_specs=P()))
    difftest(f, np.arange(32, dtype=np.float32).reshape(8, 4), sharded=True, exact=True)
'''


def test_pytest_plugin_with_devices_option(tmp_path):
    (tmp_path / "test_sharded_fn.py").write_text(PLUGIN_TEST)
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "--difftest-devices", "4", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout, done.stdout
