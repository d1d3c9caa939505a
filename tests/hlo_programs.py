"""JAX programs covering every op family, for the HLO text tests (tests/test_hlo_text.py).

Each entry is ``name -> (function, example arguments)``; the tests take the HLO text JAX
prints before optimization (``lower().as_text(dialect="hlo")``) and after
(``compile().as_text()``) and check import, printing, round trips and execution.
"""

from __future__ import annotations

import numpy as np


def programs():
    import jax
    import jax.numpy as jnp
    from jax import lax

    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    i32 = lambda *s: rng.integers(-50, 50, s).astype(np.int32)  # noqa: E731
    spd = f32(4, 4)
    spd = spd @ spd.T + 4 * np.eye(4, dtype=np.float32)

    def scan_rnn(w, xs):
        def step(h, x):
            h = jnp.tanh(h @ w + x)
            return h, h.sum()
        return lax.scan(step, jnp.zeros((8,), jnp.float32), xs)

    def while_loop(x):
        return lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.5 + 1), (0, x))

    def conv(x, k):
        return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def maxpool_grad(x):
        pool = lambda y: lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID").sum()  # noqa: E731
        return jax.grad(pool)(x)

    def gather_scatter(x, idx):
        g = x[idx]
        return g, x.at[idx].add(1.0), x.at[idx].set(g * 2)

    def dynamic(x, i):
        s = lax.dynamic_slice(x, (i, np.int32(0)), (2, 3))
        return lax.dynamic_update_slice(x, s * 2, (i + np.int32(1), np.int32(1)))

    table = {
        "elementwise_unary": (lambda x: (jnp.sin(x), jnp.cos(x), jnp.exp(x), jnp.log1p(jnp.abs(x)), jnp.tanh(x),
                                         jnp.sqrt(jnp.abs(x)), lax.rsqrt(jnp.abs(x) + 1), jnp.floor(x), jnp.ceil(x),
                                         jnp.round(x), jnp.sign(x), -x, jnp.expm1(x), lax.logistic(x),
                                         lax.erf(x), jnp.isfinite(x), jnp.cbrt(x), jnp.tan(x)), (f32(3, 5),)),
        "elementwise_binary": (lambda x, y: (x + y, x - y, x * y, x / y, jnp.maximum(x, y), jnp.minimum(x, y),
                                             jnp.arctan2(x, y), jnp.power(jnp.abs(x), y), jnp.remainder(x, y)),
                               (f32(4, 4), f32(4, 4))),
        "integers": (lambda a, b: (a & b, a | b, a ^ ~b, a << 2, a >> 1, lax.shift_right_logical(a, np.int32(3)),
                                   lax.clz(a), lax.population_count(a), a // (jnp.abs(b) + 1), a % 7,
                                   jnp.abs(a), lax.max(a, b)), (i32(6), i32(6))),
        "compare_select_clamp": (lambda x, y: (jnp.where(x > y, x, y), jnp.clip(x, -0.5, 0.5), x == y, x <= y,
                                               x != y), (f32(5), f32(5))),
        "convert_bitcast": (lambda x: (x.astype(jnp.int32), x.astype(jnp.bfloat16), x.astype(jnp.float16),
                                       lax.bitcast_convert_type(x, jnp.int32), (x > 0).astype(jnp.float32)),
                            (f32(8),)),
        "shapes": (lambda x: (jnp.broadcast_to(x[:, None], (3, 4, 5)), x.reshape(5, 3), x.T, x[1:, ::2],
                              jnp.concatenate([x, x], 1), jnp.pad(x, ((1, 2), (0, 1))), x[::-1],
                              lax.pad(x, np.float32(0), ((1, 1, 1), (0, 0, 0))), jnp.expand_dims(x, 0)), (f32(3, 5),)),
        "iota_tuple_constants": (lambda x: (jnp.arange(6) * 2, x + jnp.array([1.0, -2.0, 3.5]), jnp.eye(3),
                                            jnp.full((2,), jnp.inf), jnp.array([True, False])), (f32(3),)),
        "dot_general": (lambda a, b, c: (a @ b, jnp.einsum("bij,bjk->bik", c, c), jnp.dot(a[0], b[:, 0])),
                        (f32(4, 6), f32(6, 3), f32(2, 3, 3))),
        "convolution": (conv, (f32(1, 6, 6, 3), f32(3, 3, 3, 4))),
        "reductions": (lambda x: (x.sum(0), x.max(1), jnp.argmax(x, 1), x.prod(), jnp.cumsum(x, 0),
                                  jnp.mean(x), jnp.any(x > 1)), (f32(4, 6),)),
        "reduce_window_select_and_scatter": (maxpool_grad, (f32(1, 4, 4, 2),)),
        "gather_scatter": (gather_scatter, (f32(6, 3), np.array([0, 2, 5], np.int32))),
        "dynamic_slice": (dynamic, (f32(5, 6), np.int32(1))),
        "sort": (lambda x: (jnp.sort(x, 1), jnp.argsort(x[0]), lax.sort((x[0], x[1]), num_keys=1)), (f32(3, 7),)),
        "while": (while_loop, (f32(3),)),
        "scan": (scan_rnn, (f32(8, 8), f32(6, 8))),
        "cond_switch": (lambda i, x: (lax.cond(i > 0, jnp.sin, jnp.cos, x),
                                      lax.switch(i, [jnp.sin, jnp.cos, jnp.exp], x)), (np.int32(1), f32(4))),
        "fft": (lambda x: (jnp.fft.fft(x), jnp.fft.rfft(x.real)), (f32(8).astype(np.complex64),)),
        "linalg": (lambda a, b: (jnp.linalg.cholesky(a), jax.scipy.linalg.solve_triangular(a, b, lower=True)),
                   (spd, f32(4, 2))),
        "complex": (lambda x, y: (lax.complex(x, y) * lax.complex(y, x), jnp.abs(lax.complex(x, y)),
                                  jnp.exp(lax.complex(x, y)).real), (f32(4), f32(4))),
        "reduce_precision_random": (lambda x, k: (lax.reduce_precision(x, 5, 10),
                                                  jax.random.uniform(jax.random.wrap_key_data(k), (3,))),
                                    (f32(6), np.array([0, 42], np.uint32))),
        "mlp": (lambda w1, w2, x: jax.nn.softmax(jax.nn.relu(x @ w1) @ w2), (f32(16, 32), f32(32, 10), f32(8, 16))),
        "grad": (lambda w, x: jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w), (f32(5, 3), f32(4, 5))),
    }
    return table


def hlo_texts(name: str):
    """(pre-optimization text, post-optimization text, function, args) of program ``name``."""
    import jax

    fn, args = programs()[name]
    lowered = jax.jit(fn).lower(*args)
    return lowered.as_text(dialect="hlo"), lowered.compile().as_text(), fn, args
