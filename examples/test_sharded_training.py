"""The sharded training example runs on 4 host devices and follows jax.jit (in a subprocess: the device count
is set before jax starts, and this process has started it)."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

HERE = os.path.dirname(os.path.abspath(__file__))


def test_sharded_training_example():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE]),
               XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    code = "from sharded_training import main; print('WORST', main(steps=2))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "1 replicas x 4 partitions" in lines[0] and "all-reduce" in lines[0], lines[0]
    assert lines[1:5] == [f"  cpu:{d}: loss (), w1 shard (16, 16), w2 shard (16, 4)" for d in range(4)], lines
    worst = float(lines[-1].split()[-1])
    assert worst < 1e-5  # f32 dots: the executor's are not XLA CPU's bit for bit (docs/sharded-programs.md)
