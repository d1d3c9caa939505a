"""Real-program shapes: the small, loop-heavy programs people write with JAX (issue 28's table), as workloads.

Each is a JAX function as its users write it and its arguments, in the :class:`workloads.Workload` form, so
``benchmarks/bench_real_programs.py`` times them against jax.jit in one run, with the machinery of
``bench_executor.py``:

* ``jax.experimental.ode.odeint`` of a pendulum, 20 time points (an adaptive solver: nested while loops);
* ``jax.scipy.special.betainc`` on 1,000 elements (a continued fraction in a while loop);
* ``jax.random.gamma``, 256 samples (rejection sampling in a while loop);
* an LSTM over ``lax.scan``, 50 steps, batch 4;
* a Newton iteration in ``lax.while_loop`` on 512 elements;
* a ``fori_loop`` of ``dynamic_slice`` / ``dynamic_update_slice``.
"""

from __future__ import annotations

import numpy as np

from workloads import Workload


def odeint_pendulum() -> Workload:
    import jax.numpy as jnp
    from jax.experimental.ode import odeint

    def pendulum(y, t, damping):
        theta, omega = y[0], y[1]
        return jnp.stack([omega, -damping * omega - 9.81 * jnp.sin(theta)])

    def solve(y0, ts, damping):
        return odeint(pendulum, y0, ts, damping)

    return Workload("odeint pendulum, 20 points", "real", solve,
                    (np.array([1.0, 0.0], np.float32), np.linspace(0, 5, 20, dtype=np.float32), np.float32(0.1)))


def betainc() -> Workload:
    from jax.scipy.special import betainc as jax_betainc

    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 5, 1000).astype(np.float32)
    b = rng.uniform(0.5, 5, 1000).astype(np.float32)
    x = rng.uniform(0, 1, 1000).astype(np.float32)
    return Workload("betainc, 1k elements", "real", jax_betainc, (a, b, x))


def gamma_samples() -> Workload:
    import jax

    def sample(key, alpha):
        return jax.random.gamma(key, alpha, (256,))

    return Workload("random.gamma, 256 samples", "real", sample, (np.array([0, 42], np.uint32), np.float32(2.5)))


def lstm_scan() -> Workload:
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    hidden, features, steps, batch = 32, 16, 50, 4
    w = (rng.standard_normal((features + hidden, 4 * hidden)) * 0.1).astype(np.float32)
    bias = np.zeros(4 * hidden, np.float32)
    xs = rng.standard_normal((steps, batch, features)).astype(np.float32)

    def lstm(w, bias, xs):
        def step(carry, x):
            h, c = carry
            z = jnp.concatenate([x, h], axis=-1) @ w + bias
            i, f, g, o = jnp.split(z, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((xs.shape[1], hidden), xs.dtype)
        return jax.lax.scan(step, (zeros, zeros), xs)[1]

    return Workload("LSTM over lax.scan, 50 steps, batch 4", "real", lstm, (w, bias, xs))


def newton_while() -> Workload:
    import jax
    import jax.numpy as jnp

    def newton_sqrt(a):
        def cond(state):
            x, i = state
            return (i < 50) & jnp.any(jnp.abs(x * x - a) > 1e-6 * a)

        def body(state):
            x, i = state
            return 0.5 * (x + a / x), i + 1

        return jax.lax.while_loop(cond, body, (a, 0))[0]

    a = np.random.default_rng(0).uniform(1, 100, 512).astype(np.float32)
    return Workload("Newton iteration in while_loop, 512 elements", "real", newton_sqrt, (a,))


def fori_dynamic_slices() -> Workload:
    import jax

    def shift_rows(x):
        def body(i, acc):
            row = jax.lax.dynamic_slice(x, (i, 0), (1, x.shape[1]))
            return jax.lax.dynamic_update_slice(acc, row * 2.0 + 1.0, (x.shape[0] - 1 - i, 0))

        return jax.lax.fori_loop(0, x.shape[0], body, x)

    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    return Workload("fori_loop of dynamic slices / updates", "real", shift_rows, (x,))


REAL_PROGRAMS = (odeint_pendulum, betainc, gamma_samples, lstm_scan, newton_while, fori_dynamic_slices)
