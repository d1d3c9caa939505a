"""The workloads of the executor benchmark, each written as its users write it: a JAX function, the arguments,
and where it makes sense the same math written by hand in NumPy.

``benchmarks/bench_executor.py`` imports each function with :func:`interop.import_jax`, compiles it with the
executor's default options and times it against ``jax.jit`` of the same function (and against the NumPy
version) in one run. The shapes are the ones issue 9 names: a 256x1024 MLP, an 8x32x32 convnet, 4x8x256x64
attention, a 64-step scan RNN, a 4M-element element-wise function, a 1,500-op chain of small ops, a while loop
of 1,000 scalar iterations, a flax-style ResNet block and a GPT-2-style decoder block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class Workload:
    """One benchmark case: ``fn(*args)`` in JAX, optionally ``numpy_fn(*args)`` computing the same by hand."""

    name: str
    group: str  # "model" (the five of the geomean goal), "overhead" (chain), "loop", "block"
    fn: Callable
    args: tuple
    numpy_fn: Callable | None = None


def _rng():
    return np.random.default_rng(0)


def _np_softmax(z, axis=-1):
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def mlp() -> Workload:
    import jax
    import jax.numpy as jnp

    rng = _rng()
    batch, width = 256, 1024
    args = tuple(rng.standard_normal(s, dtype=np.float32) * 0.05 for s in
                 [(batch, width), (width, width), (width,), (width, width), (width,)])

    def fn(x, w1, b1, w2, b2):
        h = jnp.maximum(x @ w1 + b1, 0)
        return jax.nn.softmax(h @ w2 + b2, axis=1)

    def numpy_fn(x, w1, b1, w2, b2):
        h = np.maximum(x @ w1 + b1, 0)
        return _np_softmax(h @ w2 + b2, axis=1)

    return Workload("MLP 256x1024", "model", fn, args, numpy_fn)


def convnet() -> Workload:
    import jax
    import jax.numpy as jnp

    rng = _rng()
    x = rng.standard_normal((8, 32, 32, 3), dtype=np.float32)
    k1 = rng.standard_normal((3, 3, 3, 16), dtype=np.float32) * 0.2
    k2 = rng.standard_normal((3, 3, 16, 32), dtype=np.float32) * 0.1
    w = rng.standard_normal((8 * 8 * 32, 10), dtype=np.float32) * 0.02

    def fn(x, k1, k2, w):
        dn = ("NHWC", "HWIO", "NHWC")
        h = jax.nn.relu(jax.lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn))
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = jax.nn.relu(jax.lax.conv_general_dilated(h, k2, (1, 1), "SAME", dimension_numbers=dn))
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return jax.nn.log_softmax(h.reshape(8, -1) @ w)

    return Workload("convnet 8x32x32", "model", fn, (x, k1, k2, w))


def attention() -> Workload:
    import jax
    import jax.numpy as jnp

    rng = _rng()
    q, k, v = (rng.standard_normal((4, 8, 256, 64), dtype=np.float32) for _ in range(3))

    def fn(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(8.0)
        mask = jnp.tril(jnp.ones((256, 256), bool))
        s = jnp.where(mask, s, np.float32(-1e9))
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    def numpy_fn(q, k, v):
        s = np.matmul(q, k.swapaxes(-1, -2)) / np.float32(8.0)
        s = np.where(np.tril(np.ones((256, 256), bool)), s, np.float32(-1e9))
        return np.matmul(_np_softmax(s), v)

    return Workload("attention 4x8x256x64", "model", fn, (q, k, v), numpy_fn)


def scan_rnn() -> Workload:
    import jax
    import jax.numpy as jnp

    rng = _rng()
    xs = rng.standard_normal((64, 32, 128), dtype=np.float32)
    wx = rng.standard_normal((128, 256), dtype=np.float32) * 0.05
    wh = rng.standard_normal((256, 256), dtype=np.float32) * 0.05
    h0 = np.zeros((32, 256), np.float32)

    def fn(xs, wx, wh, h0):
        def step(h, x):
            h = jnp.tanh(x @ wx + h @ wh)
            return h, h.sum()

        return jax.lax.scan(step, h0, xs)

    def numpy_fn(xs, wx, wh, h0):
        h, sums = h0, []
        for x in xs:
            h = np.tanh(x @ wx + h @ wh)
            sums.append(h.sum())
        return h, np.array(sums)

    return Workload("scan RNN, 64 steps", "model", fn, (xs, wx, wh, h0), numpy_fn)


def elementwise() -> Workload:
    import jax
    import jax.numpy as jnp

    x = _rng().standard_normal(1 << 22, dtype=np.float32)

    def fn(x):
        return jax.nn.gelu(x * np.float32(1.5) + np.float32(0.25)) + jnp.tanh(x)

    def numpy_fn(x):
        y = x * np.float32(1.5) + np.float32(0.25)
        c = np.float32(np.sqrt(2 / np.pi))
        return np.float32(0.5) * y * (np.float32(1) + np.tanh(c * (y + np.float32(0.044715) * y ** 3))) + np.tanh(x)

    return Workload("element-wise 4M (gelu, tanh)", "model", fn, (x,), numpy_fn)


def chain() -> Workload:
    import jax.numpy as jnp

    rng = _rng()
    a, c = rng.standard_normal(8, dtype=np.float32), rng.standard_normal(8, dtype=np.float32)

    def fn(a, c):
        v = a
        for i in range(1500):
            v = (v + c) if i % 3 == 0 else (v * np.float32(0.999)) if i % 3 == 1 else jnp.sin(v)
        return v

    def numpy_fn(a, c):
        v = a
        for i in range(1500):
            v = (v + c) if i % 3 == 0 else (v * np.float32(0.999)) if i % 3 == 1 else np.sin(v)
        return v

    return Workload("chain of 1,500 small ops", "overhead", fn, (a, c), numpy_fn)


def scan64() -> Workload:
    import jax
    import jax.numpy as jnp

    x = _rng().standard_normal((64, 16), dtype=np.float32)

    def fn(x):
        return jax.lax.scan(lambda carry, row: (carry * np.float32(0.9) + jnp.sin(row), carry.sum()),
                            jnp.zeros(16, jnp.float32), x)

    def numpy_fn(x):
        carry, out = np.zeros(16, np.float32), []
        for row in x:
            out.append(carry.sum())
            carry = carry * np.float32(0.9) + np.sin(row)
        return carry, np.array(out)

    return Workload("scan, 64 small steps", "loop", fn, (x,), numpy_fn)


def while_loop() -> Workload:
    import jax

    def fn(x):
        def body(state):
            i, v = state
            return i + 1, v * np.float32(0.999) + np.float32(0.001)

        return jax.lax.while_loop(lambda s: s[0] < 1000, body, (np.int32(0), x))[1]

    def numpy_fn(x):
        i, v = 0, x
        while i < 1000:
            i, v = i + 1, v * np.float32(0.999) + np.float32(0.001)
        return v

    return Workload("while loop, 1,000 scalar iterations", "loop", fn, (np.float32(0.5),), numpy_fn)


def resnet_block() -> Workload:
    import jax
    import jax.numpy as jnp

    rng = _rng()
    x = rng.standard_normal((8, 32, 32, 64), dtype=np.float32)
    k1, k2 = (rng.standard_normal((3, 3, 64, 64), dtype=np.float32) * 0.05 for _ in range(2))
    scale, bias, mean, var = (rng.standard_normal(64, dtype=np.float32) * 0.1 + c for c in (1, 0, 0, 1))
    var = np.abs(var)

    def fn(x, k1, k2, scale, bias, mean, var):
        # flax.linen's Conv(3x3, SAME, no bias) -> BatchNorm(use_running_average=True) -> relu, twice, plus the
        # identity shortcut: the block of a ResNet-18/34.
        def conv_bn(h, k):
            h = jax.lax.conv_general_dilated(h, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
            return (h - mean) * jax.lax.rsqrt(var + np.float32(1e-5)) * scale + bias

        h = jax.nn.relu(conv_bn(x, k1))
        return jax.nn.relu(conv_bn(h, k2) + x)

    return Workload("ResNet block 8x32x32x64", "block", fn, (x, k1, k2, scale, bias, mean, var))


def gpt2_block() -> Workload:
    import jax
    import jax.numpy as jnp

    rng = _rng()
    batch, seq, d, heads = 2, 128, 256, 4
    x = rng.standard_normal((batch, seq, d), dtype=np.float32)
    params = {
        "ln1_g": np.ones(d, np.float32), "ln1_b": np.zeros(d, np.float32),
        "w_qkv": rng.standard_normal((d, 3 * d), dtype=np.float32) * 0.02, "b_qkv": np.zeros(3 * d, np.float32),
        "w_o": rng.standard_normal((d, d), dtype=np.float32) * 0.02, "b_o": np.zeros(d, np.float32),
        "ln2_g": np.ones(d, np.float32), "ln2_b": np.zeros(d, np.float32),
        "w_fc": rng.standard_normal((d, 4 * d), dtype=np.float32) * 0.02, "b_fc": np.zeros(4 * d, np.float32),
        "w_proj": rng.standard_normal((4 * d, d), dtype=np.float32) * 0.02, "b_proj": np.zeros(d, np.float32),
    }
    names = sorted(params)

    def fn(x, *values):
        p = dict(zip(names, values))

        def layer_norm(h, g, b):
            mu = h.mean(-1, keepdims=True)
            var = ((h - mu) ** 2).mean(-1, keepdims=True)
            return (h - mu) * jax.lax.rsqrt(var + np.float32(1e-5)) * g + b

        h = layer_norm(x, p["ln1_g"], p["ln1_b"])
        q, k, v = jnp.split(h @ p["w_qkv"] + p["b_qkv"], 3, axis=-1)
        split = lambda t: t.reshape(batch, seq, heads, d // heads).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        s = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(d // heads))
        s = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), s, np.float32(-1e10))
        a = (jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(batch, seq, d)
        x = x + a @ p["w_o"] + p["b_o"]
        h = layer_norm(x, p["ln2_g"], p["ln2_b"])
        return x + jax.nn.gelu(h @ p["w_fc"] + p["b_fc"]) @ p["w_proj"] + p["b_proj"]

    return Workload("GPT-2 block 2x128x256", "block", fn, (x, *[params[n] for n in names]))


WORKLOADS = (mlp, convnet, attention, scan_rnn, elementwise, chain, scan64, while_loop, resnet_block, gpt2_block)
"""Every workload, in the order the benchmark prints them."""
