"""difftest's noise-dominated verdict (issue 29): a quantity that is 0 in exact arithmetic is rounding noise in
float32, which Adam's first step scales to visible updates; such outputs are reported as noise-dominated, with
the evidence, and real mismatches stay mismatches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import lowering
from interop.comparison import DiffMismatchError, NoiseDominatedError, nudge_ulp, ulp_distance
from interop.jax.difftest import difftest, float64_program

LR = 1e-3


def loss(params, x):
    """A linear layer whose bias ``b`` BatchNorm cancels: d loss / d b is exactly 0, in float32 noise."""
    h = x @ params["w"] + params["b"]
    h = (h - h.mean(0)) / jnp.sqrt(h.var(0) + 1e-5) * params["gamma"]
    return jnp.mean(jnp.tanh(h) ** 2 * jnp.arange(1, h.shape[1] + 1, dtype=h.dtype))


def train_step(params, x):
    """One step of Adam from zero moments (no optax): m = (1-b1) g, v = (1-b2) g^2, bias-corrected, so the
    update is LR * g / (|g| + eps): a gradient of 1e-9 becomes an update of order LR."""
    grads = jax.grad(loss)(params, x)
    b1, b2, eps = 0.9, 0.999, 1e-8

    def adam(w, g):
        m, v = (1 - b1) * g, (1 - b2) * g * g
        return w - LR * (m / (1 - b1)) / (jnp.sqrt(v / (1 - b2)) + eps)

    return jax.tree.map(adam, params, grads), grads


def inputs(batch=32, features=8, units=8):
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((features, units)).astype(np.float32),
              "b": rng.standard_normal(units).astype(np.float32),
              "gamma": np.ones(units, np.float32)}
    return params, rng.standard_normal((batch, features)).astype(np.float32)


def executor_with(monkeypatch, change):
    """Make difftest's executor return ``change(args, outputs)`` (outputs as a list, args flat)."""
    real = lowering.compile

    def compile_(module, **options):
        run = real(module, **options)
        return lambda *args: tuple(change(args, list(run(*args))))

    monkeypatch.setattr(lowering, "compile", compile_)


def reversed_batch_executor(monkeypatch, extra=lambda outputs: outputs):
    """Another, equally valid, order of every sum over the batch: the executor on the batch reversed (the
    outputs do not depend on the order of the rows), whatever order the executor itself uses; ``extra``
    changes the results after."""
    real = lowering.compile

    def compile_(module, **options):
        run = real(module, **options)

        def call(*args):  # leaves of (params, x): b, gamma, w, x
            *params, x = args
            return tuple(extra(list(run(*params, x[::-1].copy()))))

        return call

    monkeypatch.setattr(lowering, "compile", compile_)


NAMES = ["[0]['b']", "[0]['gamma']", "[0]['w']", "[1]['b']", "[1]['gamma']", "[1]['w']"]


def test_adam_step_on_a_gradient_zero_in_exact_arithmetic_is_noise_dominated_with_the_evidence(monkeypatch):
    reversed_batch_executor(monkeypatch)
    params, x = inputs()
    report = difftest(train_step, params, x)
    assert [o.name for o in report.outputs] == NAMES
    by_name = {o.name: o for o in report.outputs}
    grad_b, new_b = by_name["[1]['b']"], by_name["[0]['b']"]
    assert report.verdict == "noise-dominated", str(report)
    assert not report.ok and not report
    assert grad_b.status == "noise-dominated" and grad_b.noise_dominated and not grad_b.ok
    assert new_b.status == "noise-dominated"  # the visible consequence: updates of order LR
    assert new_b.comparison.max_abs > LR / 100
    # Every other output agrees, or is noise too (the order of the sums over the batch changed).
    assert all(o.ok or o.noise_dominated for o in report.outputs)
    assert by_name["[0]['w']"].ok and by_name["[1]['w']"].ok

    ev = grad_b.noise
    assert ev.dominated and ev.explained == ev.elements == grad_b.comparison.mismatches
    assert ev.samples == 17 and ev.factor == 4
    # The evidence: the float64 value is 0 up to float64 noise, XLA's own float32 error is that of the
    # differences, and ours is within 4x of it.
    assert abs(ev.reference) < 1e-15 < 1e-11 < ev.own_error
    assert abs(ev.expected - ev.reference) <= ev.own_error
    assert abs(ev.actual - ev.expected) <= 4 * ev.own_error
    assert ev.low <= ev.expected <= ev.high
    text = str(report)
    assert text.startswith("difftest train_step: NOISE-DOMINATED (6 outputs): #0 [0]['b']: noise-dominated, ")
    assert "noise-dominated: all" in text and "float64" in text and "more than the value itself" in text
    d = grad_b.as_dict()
    assert d["status"] == "noise-dominated" and d["noise"]["dominated"] and d["noise"]["samples"] == 17

    with pytest.raises(NoiseDominatedError) as info:
        report.raise_if_mismatch()
    assert isinstance(info.value, DiffMismatchError)  # callers catching mismatches catch it too

    accepted = difftest(train_step, params, x, accept_noise=True)
    assert accepted.ok and accepted.verdict == "noise-dominated"
    assert str(accepted).startswith("difftest train_step: OK (noise-dominated accepted: #0 [0]['b']")
    assert accepted.raise_if_mismatch() is accepted


def test_wrong_results_are_still_mismatches_next_to_noise(monkeypatch):
    """A relative error of 1e-4 on a well-determined output, and 10 LR on the noisy bias update, injected into
    the executor's results: both are mismatches ('not rounding noise'), the gradient stays noise."""

    def bugs(outputs):
        outputs[2] = outputs[2] * np.float32(1 + 1e-4)  # [0]['w']: XLA's own error is within the ULP budget
        outputs[0] = outputs[0] + np.float32(10 * LR)  # [0]['b']: far beyond XLA's own error
        return outputs

    reversed_batch_executor(monkeypatch, bugs)
    params, x = inputs()
    report = difftest(train_step, params, x, accept_noise=True)
    by_name = {o.name: o for o in report.outputs}
    assert report.verdict == "mismatch" and not report.ok, str(report)
    new_w, new_b, grad_b = by_name["[0]['w']"], by_name["[0]['b']"], by_name["[1]['b']"]
    assert new_w.status == new_b.status == "MISMATCH"
    assert grad_b.status == "noise-dominated"
    assert new_w.noise.accurate == new_w.comparison.mismatches and new_w.noise.explained == 0
    assert new_b.noise.explained == 0 and abs(new_b.noise.actual - new_b.noise.expected) > 4 * new_b.noise.own_error
    text = str(report)
    assert text.startswith("difftest train_step: MISMATCH (6 outputs): #0 [0]['b']: ")
    assert "where XLA's own error is within the ULP budget" in text
    assert "that differ by more than 4x XLA's own error" in text
    with pytest.raises(DiffMismatchError) as info:
        report.raise_if_mismatch()
    assert not isinstance(info.value, NoiseDominatedError)


def test_the_real_executor_on_the_training_step_is_never_a_mismatch():
    params, x = inputs()
    report = difftest(train_step, params, x)
    assert report.verdict in ("ok", "noise-dominated"), str(report)
    assert difftest(train_step, params, x, accept_noise=True).ok


def test_an_element_wise_error_beyond_the_budget_is_not_noise(monkeypatch):
    executor_with(monkeypatch, lambda args, out: [(o.view(np.uint32) + np.uint32(8)).view(np.float32) for o in out])
    x = np.linspace(0.5, 3, 20, dtype=np.float32)
    report = difftest(lambda x: jnp.sin(x) * jnp.exp(x), x, rtol_magnitude=0)
    (o,) = report.outputs
    assert o.status == "MISMATCH" and report.verdict == "mismatch"
    assert o.noise.accurate == o.noise.elements == 20 and o.noise.explained == 0
    assert "not rounding noise: of 20 elements that differ, 20 where XLA's own error is within the ULP budget" \
        in str(report)


def test_outputs_not_analysed(monkeypatch):
    executor_with(monkeypatch, lambda args, out: [o + o.dtype.type(1e-3) for o in out])
    x = np.linspace(1, 2, 8)
    f64 = difftest(lambda x: x - x.mean(), x)
    assert f64.outputs[0].status == "MISMATCH" and not f64.outputs[0].noise.samples
    assert "not analysed for rounding noise: no reference more precise than float64" in str(f64)
    x = x.astype(np.float32)
    assert difftest(lambda x: x * 2, x, exact=True).outputs[0].noise is None
    off = difftest(lambda x: x * 2, x, noise_samples=0)
    assert off.outputs[0].noise is None and off.verdict == "mismatch"


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, ml_dtypes.bfloat16])
def test_nudge_ulp_moves_each_element_by_at_most_one_ulp(dtype):
    x = np.array([0.0, -0.0, 1.0, -2.5, 3e-3, np.inf, -np.inf, np.nan] * 16).astype(dtype)
    moved = nudge_ulp(x, np.random.default_rng(0))
    assert moved.dtype == x.dtype and moved.shape == x.shape
    d = ulp_distance(moved, x)
    assert d.max() == 1 and 0 < np.count_nonzero(d) < x.size
    keep = ~np.isfinite(x.astype(np.float64)) | (x.astype(np.float64) == 0)
    assert (d[keep] == 0).all() and (np.signbit(moved[1::8].astype(np.float64))).all()
    assert np.array_equal(nudge_ulp(x, np.random.default_rng(0)).view(np.uint8), moved.view(np.uint8))


@jax.custom_vjp
def _sin(x):
    return jnp.sin(x)


_sin.defvjp(lambda x: (_sin(x), x), lambda x, g: (g * jnp.cos(x),))


def program(x, key, n):
    """Random bits (dropout; threefry is slow to compile: once), loops (fori, while), cond, scan, checkpoint,
    custom derivatives, a scatter-add (the gradient of a gather), bf16."""
    keep = jax.random.bernoulli(key, 0.9, x.shape)
    h = jnp.where(keep, x / 0.9, 0) + jax.nn.relu(x) + jax.nn.softmax(x, -1)
    h = jax.lax.fori_loop(0, n, lambda i, c: c * 0.5 + jnp.tanh(c), h)
    h = jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 1.1), (0, h))[1]
    h = jax.lax.cond(h.sum() > 0, lambda a: a + 1, lambda a: a - 1, h)
    h, ys = jax.lax.scan(lambda c, xi: (c + xi, c * 2), h[0], h)
    h = jax.checkpoint(jnp.sin)(h) + _sin(h).sum()
    labels = jnp.arange(x.shape[0]) % x.shape[1]
    grads = jax.grad(lambda x: jnp.take_along_axis(jax.nn.log_softmax(x), labels[:, None], 1).sum())(x)
    return h, ys.astype(jnp.bfloat16), grads, jnp.argmax(ys), jnp.sum(x - x.mean())


@pytest.mark.parametrize("x64, key", [(False, jax.random.PRNGKey(3)), (True, jax.random.key(3))],
                         ids=["32-bit, raw key", "x64, typed key"])
def test_float64_program_computes_what_the_program_computes(x64, key):
    """The float64 evaluation follows the traced program, random bits included (without x64 the program
    draws 32-bit random numbers; a retrace with float64 inputs would draw other ones)."""
    x = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    with jax.enable_x64(x64):
        args = (x, key, 3)
        ref = float64_program(program, args, {})(jax.tree.leaves(args))
        got = [np.asarray(o) for o in jax.tree.leaves(jax.jit(program)(*args))]
    assert len(ref) == len(got) == 5
    for r, g in zip(ref[:3], got[:3]):
        assert r.dtype == np.float64 and r.shape == g.shape
        np.testing.assert_allclose(g.astype(np.float64), r, rtol=3e-6 if g.dtype == np.float32 else 1e-2,
                                   atol=1e-5)
    assert np.array_equal(ref[3], got[3])
    # The cancellation: float64 sees the exact value's size, float32 its own rounding noise.
    assert abs(ref[4]) < 1e-13 < abs(got[4])
