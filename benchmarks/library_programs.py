"""Real JAX programs written with JAX's libraries (flax, optax, equinox, diffrax, numpyro) and its own solvers,
as their users write them: small models, training steps, optimizer updates, ODE solves, samplers, filters.

Issue 28's last target: the median ratio over a suite of real JAX programs <= 2x jax.jit, none above 10x.
Each entry of :data:`LIBRARY_PROGRAMS` makes a :class:`workloads.Workload` (``fn(*args)``, the arguments
pytrees of NumPy arrays: the executable takes their ``jax.tree.leaves``); ``benchmarks/bench_library_programs.py``
imports, checks and times each against jax.jit. A library that is not installed makes its programs fail to
build (an ``ImportError``): the benchmark lists them with the error. The libraries are the ``bench`` extra
(``pip install -e '.[bench]'``). The sizes are the small ones of tutorials and research scripts.
"""

from __future__ import annotations

import numpy as np

from workloads import Workload


def _rng(seed: int = 0):
    return np.random.default_rng(seed)


def _f32(*shape, scale=1.0, seed=0):
    return (_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _numpy_tree(tree):
    """The pytree with NumPy leaves (what the executor takes; jax.jit takes them too)."""
    import jax

    return jax.tree.map(np.asarray, tree)


# ----------------------------------------------------------------------------------------------------------
# flax.linen
# ----------------------------------------------------------------------------------------------------------

def _linen_mlp():
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(128)(x))
            x = nn.relu(nn.Dense(64)(x))
            return nn.Dense(10)(x)

    return MLP()


def linen_mlp_forward() -> Workload:
    import jax

    model = _linen_mlp()
    x = _f32(32, 784)
    params = _numpy_tree(model.init(jax.random.PRNGKey(0), x))

    def forward(params, x):
        return jax.nn.log_softmax(model.apply(params, x))

    return Workload("linen MLP forward 32x784", "flax", forward, (params, x))


def linen_mlp_adam_step() -> Workload:
    import jax
    import optax

    model = _linen_mlp()
    x = _f32(32, 784)
    labels = _rng().integers(0, 10, 32).astype(np.int32)
    params = model.init(jax.random.PRNGKey(0), x)
    tx = optax.adam(1e-3)
    state = tx.init(params)

    def train_step(params, opt_state, x, labels):
        def loss_fn(params):
            logits = model.apply(params, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return Workload("linen MLP train step, optax adam", "flax", train_step,
                    (_numpy_tree(params), _numpy_tree(state), x, labels))


def _linen_cnn():
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(16, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = nn.relu(nn.Conv(32, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = x.reshape(x.shape[0], -1)
            x = nn.relu(nn.Dense(64)(x))
            return nn.Dense(10)(x)

    return CNN()


def linen_cnn_forward() -> Workload:
    import jax

    model = _linen_cnn()
    x = _f32(8, 28, 28, 1)
    params = _numpy_tree(model.init(jax.random.PRNGKey(0), x))
    return Workload("linen CNN forward 8x28x28", "flax", model.apply, (params, x))


def linen_cnn_adamw_step() -> Workload:
    import jax
    import optax

    model = _linen_cnn()
    x = _f32(8, 28, 28, 1)
    labels = _rng().integers(0, 10, 8).astype(np.int32)
    params = model.init(jax.random.PRNGKey(0), x)
    tx = optax.adamw(1e-3, weight_decay=1e-4)
    state = tx.init(params)

    def train_step(params, opt_state, x, labels):
        def loss_fn(params):
            return optax.softmax_cross_entropy_with_integer_labels(model.apply(params, x), labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return Workload("linen CNN train step, optax adamw", "flax", train_step,
                    (_numpy_tree(params), _numpy_tree(state), x, labels))


def linen_lstm_rnn() -> Workload:
    import flax.linen as nn
    import jax

    class Seq(nn.Module):
        @nn.compact
        def __call__(self, xs):
            h = nn.RNN(nn.OptimizedLSTMCell(32))(xs)
            return nn.Dense(1)(h[:, -1])

    model = Seq()
    xs = _f32(4, 50, 8)
    params = _numpy_tree(model.init(jax.random.PRNGKey(0), xs))
    return Workload("linen nn.RNN(OptimizedLSTMCell), 50 steps", "flax", model.apply, (params, xs))


# ----------------------------------------------------------------------------------------------------------
# flax.nnx (functional form: nnx.split / nnx.merge, as under jax.jit)
# ----------------------------------------------------------------------------------------------------------

def nnx_transformer_block() -> Workload:
    import jax
    from flax import nnx

    class Block(nnx.Module):
        def __init__(self, d, heads, rngs):
            self.ln1 = nnx.LayerNorm(d, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(heads, d, decode=False, rngs=rngs)
            self.ln2 = nnx.LayerNorm(d, rngs=rngs)
            self.fc1 = nnx.Linear(d, 4 * d, rngs=rngs)
            self.fc2 = nnx.Linear(4 * d, d, rngs=rngs)

        def __call__(self, x):
            mask = nnx.make_causal_mask(x[..., 0])
            x = x + self.attn(self.ln1(x), mask=mask)
            return x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x))))

    graphdef, state = nnx.split(Block(64, 4, nnx.Rngs(0)))

    def forward(state, x):
        return nnx.merge(graphdef, state)(x)

    return Workload("nnx transformer block 4x16x64", "flax", forward, (_numpy_tree(state), _f32(4, 16, 64)))


def nnx_gru_sequence() -> Workload:
    import jax.numpy as jnp
    from flax import nnx

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.rnn = nnx.RNN(nnx.GRUCell(8, 32, rngs=rngs))
            self.head = nnx.Linear(32, 1, rngs=rngs)

        def __call__(self, xs):
            carry = jnp.zeros((xs.shape[0], 32), xs.dtype)
            return self.head(self.rnn(xs, initial_carry=carry)[:, -1])

    # nnx.RNN keeps an Rngs (a typed key) for its carry's initializer: the parameters are the argument.
    graphdef, params, rest = nnx.split(Model(nnx.Rngs(0)), nnx.Param, ...)

    def forward(params, xs):
        return nnx.merge(graphdef, params, rest)(xs)

    return Workload("nnx RNN(GRUCell), 50 steps", "flax", forward, (_numpy_tree(params), _f32(4, 50, 8)))


def nnx_mlp_sgd_step() -> Workload:
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(16, 64, rngs=rngs)
            self.l2 = nnx.Linear(64, 1, rngs=rngs)

        def __call__(self, x):
            return self.l2(jax.nn.silu(self.l1(x)))

    graphdef, params = nnx.split(MLP(nnx.Rngs(0)), nnx.Param)
    tx = optax.sgd(1e-2, momentum=0.9)
    opt_state = tx.init(params)

    def train_step(params, opt_state, x, y):
        def loss_fn(params):
            return jnp.mean((nnx.merge(graphdef, params)(x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return Workload("nnx MLP train step, optax sgd momentum", "flax", train_step,
                    (_numpy_tree(params), _numpy_tree(opt_state), _f32(64, 16), _f32(64, 1, seed=1)))


# ----------------------------------------------------------------------------------------------------------
# optax
# ----------------------------------------------------------------------------------------------------------

def _param_tree():
    return {"w1": _f32(64, 128, scale=0.1), "b1": np.zeros(128, np.float32),
            "w2": _f32(128, 10, scale=0.1, seed=1), "b2": np.zeros(10, np.float32)}


def _optax_update(name: str, tx) -> Workload:
    import jax
    import optax

    params = _param_tree()
    grads = jax.tree.map(lambda p: _f32(*p.shape, scale=0.01, seed=p.size), params)
    state = _numpy_tree(tx.init(params))

    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    return Workload(name, "optax", step, (params, state, grads))


def optax_adamw_update() -> Workload:
    import optax

    return _optax_update("optax adamw update, 9k params", optax.adamw(1e-3, weight_decay=1e-2))


def optax_lion_update() -> Workload:
    import optax

    return _optax_update("optax lion update, 9k params", optax.lion(1e-4))


def optax_clipped_schedule_update() -> Workload:
    import optax

    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 1000)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(schedule))
    return _optax_update("optax chain(clip_by_global_norm, adam(cosine schedule))", tx)


def optax_fit_in_scan() -> Workload:
    """A whole small fit in one program: 200 adam steps of a linear regression in ``lax.scan``."""
    import jax
    import jax.numpy as jnp
    import optax

    x, w_true = _f32(128, 8), _f32(8, 1, seed=1)
    y = x @ w_true + 0.1 * _f32(128, 1, seed=2)
    tx = optax.adam(0.05)

    def fit(w, x, y):
        def loss(w):
            return jnp.mean((x @ w - y) ** 2)

        def step(carry, _):
            w, state = carry
            value, g = jax.value_and_grad(loss)(w)
            updates, state = tx.update(g, state, w)
            return (optax.apply_updates(w, updates), state), value

        (w, _), losses = jax.lax.scan(step, (w, tx.init(w)), None, length=200)
        return w, losses

    return Workload("optax adam fit, 200 steps in lax.scan", "optax", fit, (np.zeros((8, 1), np.float32), x, y))


# ----------------------------------------------------------------------------------------------------------
# equinox
# ----------------------------------------------------------------------------------------------------------

def equinox_mlp_forward() -> Workload:
    import equinox as eqx
    import jax

    model = eqx.nn.MLP(4, 2, 64, 3, activation=jax.nn.tanh, key=jax.random.PRNGKey(0))
    params, static = eqx.partition(model, eqx.is_array)

    def forward(params, x):  # the body of an eqx.filter_jit-ed `lambda model, x: jax.vmap(model)(x)`
        return jax.vmap(eqx.combine(params, static))(x)

    return Workload("equinox MLP forward (vmap), 64x4", "equinox", forward, (_numpy_tree(params), _f32(64, 4)))


def equinox_train_step() -> Workload:
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import optax

    model = eqx.nn.MLP(1, 1, 32, 2, activation=jax.nn.softplus, key=jax.random.PRNGKey(0))
    tx = optax.adam(3e-3)
    params, static = eqx.partition(model, eqx.is_array)
    opt_state = tx.init(params)
    x = np.linspace(-2, 2, 64, dtype=np.float32)[:, None]
    y = np.sin(2 * x).astype(np.float32)

    def train_step(params, opt_state, x, y):  # what eqx.filter_jit traces for step(model, opt_state, x, y)
        def loss_fn(model):
            return jnp.mean((jax.vmap(model)(x) - y) ** 2)

        loss, grads = eqx.filter_value_and_grad(loss_fn)(eqx.combine(params, static))
        updates, opt_state = tx.update(grads, opt_state, params)
        return eqx.apply_updates(params, updates), opt_state, loss

    return Workload("equinox MLP train step, optax adam", "equinox", train_step,
                    (_numpy_tree(params), _numpy_tree(opt_state), x, y))


# ----------------------------------------------------------------------------------------------------------
# diffrax
# ----------------------------------------------------------------------------------------------------------

def diffrax_tsit5_lotka_volterra() -> Workload:
    import diffrax
    import jax.numpy as jnp

    def vector_field(t, y, args):
        alpha, beta, gamma, delta = args
        prey, predator = y[0], y[1]
        return jnp.stack([alpha * prey - beta * prey * predator, delta * prey * predator - gamma * predator])

    term = diffrax.ODETerm(vector_field)
    ts = np.linspace(0, 10, 20, dtype=np.float32)

    def solve(y0, args):
        sol = diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 10.0, 0.1, y0, args=args,
                                  saveat=diffrax.SaveAt(ts=ts),
                                  stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5))
        return sol.ys

    return Workload("diffrax Tsit5 adaptive, Lotka-Volterra", "diffrax", solve,
                    (np.array([10.0, 5.0], np.float32), np.array([1.1, 0.4, 0.4, 0.1], np.float32)))


def diffrax_kvaerno5_stiff() -> Workload:
    import diffrax
    import jax.numpy as jnp

    def van_der_pol(t, y, mu):
        return jnp.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])

    term = diffrax.ODETerm(van_der_pol)

    def solve(y0, mu):
        sol = diffrax.diffeqsolve(term, diffrax.Kvaerno5(), 0.0, 5.0, 0.01, y0, args=mu,
                                  saveat=diffrax.SaveAt(t1=True),
                                  stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-6))
        return sol.ys

    return Workload("diffrax Kvaerno5 (implicit), Van der Pol mu=10", "diffrax", solve,
                    (np.array([2.0, 0.0], np.float32), np.float32(10.0)))


def diffrax_neural_ode() -> Workload:
    import diffrax
    import equinox as eqx
    import jax

    func = eqx.nn.MLP(2, 2, 16, 2, activation=jax.nn.softplus, key=jax.random.PRNGKey(0))
    params, static = eqx.partition(func, eqx.is_array)
    ts = np.linspace(0, 1, 10, dtype=np.float32)

    def solve(params, y0):
        f = eqx.combine(params, static)
        term = diffrax.ODETerm(lambda t, y, args: f(y))
        sol = diffrax.diffeqsolve(term, diffrax.Dopri5(), 0.0, 1.0, 0.05, y0, saveat=diffrax.SaveAt(ts=ts),
                                  stepsize_controller=diffrax.PIDController(rtol=1e-3, atol=1e-6))
        return sol.ys

    return Workload("diffrax neural ODE (equinox MLP), Dopri5", "diffrax", solve,
                    (_numpy_tree(params), np.array([0.5, -0.3], np.float32)))


# ----------------------------------------------------------------------------------------------------------
# numpyro
# ----------------------------------------------------------------------------------------------------------

def _regression_model(x, y=None):
    import numpyro
    import numpyro.distributions as dist

    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    numpyro.sample("y", dist.Normal(x @ w + b, sigma), obs=y)


def numpyro_log_density() -> Workload:
    import jax
    from numpyro.infer.util import log_density

    x, y = _f32(100, 3), _f32(100, seed=1)

    def log_joint_and_grad(params, x, y):
        def logp(params):
            return log_density(_regression_model, (x,), {"y": y}, params)[0]

        return jax.value_and_grad(logp)(params)

    params = {"w": _f32(3, seed=2), "b": np.float32(0.1), "sigma": np.float32(0.8)}
    return Workload("numpyro log density + grad, regression 100x3", "numpyro", log_joint_and_grad, (params, x, y))


def numpyro_sample_distributions() -> Workload:
    import jax
    import numpyro.distributions as dist

    def sample(key, concentration, loc, scale):
        k1, k2, k3 = jax.random.split(key, 3)
        theta = dist.Dirichlet(concentration).sample(k1, (64,))  # gamma rejection sampling
        z = dist.StudentT(4.0, loc, scale).sample(k2, (64,))
        b = dist.Beta(2.0, 5.0).sample(k3, (64,))
        return theta, z, dist.Dirichlet(concentration).log_prob(theta) + b

    return Workload("numpyro Dirichlet/StudentT/Beta sampling, 64 draws", "numpyro", sample,
                    (np.array([0, 7], np.uint32), np.array([1.0, 2.0, 0.5], np.float32), np.float32(0.0),
                     np.float32(1.5)))


def numpyro_random_walk_metropolis() -> Workload:
    """A hand-written sampler over numpyro's log density: 500 random-walk Metropolis steps in ``lax.scan``."""
    import jax
    import jax.numpy as jnp
    from numpyro.infer.util import log_density

    x, y = _f32(50, 2), _f32(50, seed=1)

    def sample(key, position, x, y):
        def logp(z):
            params = {"w": z[:2], "b": z[2], "sigma": jnp.exp(z[3])}
            return log_density(_regression_model, (x,), {"y": y}, params)[0] + z[3]

        def step(carry, key):
            z, lp = carry
            k1, k2 = jax.random.split(key)
            proposal = z + 0.1 * jax.random.normal(k1, z.shape)
            lp_new = logp(proposal)
            accept = jnp.log(jax.random.uniform(k2)) < lp_new - lp
            z, lp = jnp.where(accept, proposal, z), jnp.where(accept, lp_new, lp)
            return (z, lp), z

        _, chain = jax.lax.scan(step, (position, logp(position)), jax.random.split(key, 500))
        return chain

    return Workload("random-walk Metropolis on numpyro log density, 500 steps", "numpyro", sample,
                    (np.array([0, 3], np.uint32), np.zeros(4, np.float32), x, y))


# ----------------------------------------------------------------------------------------------------------
# JAX's own solvers and hand-written loops
# ----------------------------------------------------------------------------------------------------------

def kalman_filter_scan() -> Workload:
    import jax
    import jax.numpy as jnp

    dt = 0.1
    F = np.array([[1, 0, dt, 0], [0, 1, 0, dt], [0, 0, 1, 0], [0, 0, 0, 1]], np.float32)
    H = np.array([[1, 0, 0, 0], [0, 1, 0, 0]], np.float32)
    Q, R = np.eye(4, dtype=np.float32) * 0.01, np.eye(2, dtype=np.float32) * 0.5
    ys = np.cumsum(_f32(100, 2, scale=0.3), axis=0).astype(np.float32)

    def kalman(ys, m0, P0):
        def step(carry, y):
            m, P = carry
            m, P = F @ m, F @ P @ F.T + Q
            S = H @ P @ H.T + R
            K = jnp.linalg.solve(S, H @ P).T
            resid = y - H @ m
            m, P = m + K @ resid, P - K @ S @ K.T
            ll = -0.5 * (resid @ jnp.linalg.solve(S, resid) + jnp.linalg.slogdet(S)[1])
            return (m, P), (m, ll)

        (_, _), (means, lls) = jax.lax.scan(step, (m0, P0), ys)
        return means, lls.sum()

    return Workload("Kalman filter in lax.scan, 100 steps", "jax", kalman,
                    (ys, np.zeros(4, np.float32), np.eye(4, dtype=np.float32)))


def bfgs_rosenbrock() -> Workload:
    import jax.numpy as jnp
    from jax.scipy.optimize import minimize

    def rosenbrock(x):
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    def solve(x0):
        res = minimize(rosenbrock, x0, method="BFGS", options={"maxiter": 200})
        return res.x, res.fun, res.nit

    return Workload("jax.scipy.optimize.minimize BFGS, Rosenbrock 5-d", "jax", solve,
                    (np.array([-1.2, 1.0, -0.5, 0.8, 1.5], np.float32),))


def gp_log_marginal_likelihood() -> Workload:
    import jax
    import jax.numpy as jnp
    from jax.scipy.linalg import cho_solve

    x, y = np.sort(_f32(64)), _f32(64, seed=1)

    def nll_and_grad(log_params, x, y):
        def nll(log_params):
            amp, length, noise = jnp.exp(log_params)
            K = amp * jnp.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / length ** 2) + (noise + 1e-4) * jnp.eye(64)
            L = jnp.linalg.cholesky(K)
            alpha = cho_solve((L, True), y)
            return 0.5 * y @ alpha + jnp.sum(jnp.log(jnp.diag(L))) + 32 * jnp.log(2 * jnp.pi)

        return jax.value_and_grad(nll)(log_params)

    return Workload("GP negative log marginal likelihood + grad, 64 points", "jax", nll_and_grad,
                    (np.array([0.0, -0.5, -2.0], np.float32), x, y))


def optimistix_newton_root() -> Workload:
    import jax.numpy as jnp
    import optimistix as optx

    def fn(y, args):
        return jnp.tanh(y + args) - 0.5 * y

    def solve(y0, args):
        return optx.root_find(fn, optx.Newton(rtol=1e-5, atol=1e-5), y0, args).value

    return Workload("optimistix Newton root find, 16 elements", "jax", solve,
                    (np.full(16, 1.0, np.float32), np.linspace(-1, 1, 16, dtype=np.float32)))


LIBRARY_PROGRAMS = (
    linen_mlp_forward, linen_mlp_adam_step, linen_cnn_forward, linen_cnn_adamw_step, linen_lstm_rnn,
    nnx_transformer_block, nnx_gru_sequence, nnx_mlp_sgd_step,
    optax_adamw_update, optax_lion_update, optax_clipped_schedule_update, optax_fit_in_scan,
    equinox_mlp_forward, equinox_train_step,
    diffrax_tsit5_lotka_volterra, diffrax_kvaerno5_stiff, diffrax_neural_ode,
    numpyro_log_density, numpyro_sample_distributions, numpyro_random_walk_metropolis,
    kalman_filter_scan, bfgs_rosenbrock, gp_log_marginal_likelihood, optimistix_newton_root,
)
