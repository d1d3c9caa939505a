"""pytest plugin (entry point ``pytest11``): the ``difftest`` fixture and its ``--difftest-max-ulp`` option, and
the ``check_pass`` fixture (a pass keeps programs' results:
:func:`interop.debugging.pass_testing.assert_preserves_semantics`).

With the package installed, every test session has it::

    def test_model(difftest):
        difftest(model_fn, x)              # fails the test on a mismatch, showing the report

    def test_loose(difftest):
        report = difftest(fn, x, max_ulp=16, atol=1e-6)
        assert report.outputs[0].comparison.max_ulp <= 16

The fixture calls :func:`interop.difftest` (:mod:`interop.jax.difftest`) and raises
:class:`~interop.comparison.DiffMismatchError` (a test failure that prints the
per-output table; its first line, which pytest's short summary shows, names
the outputs that differ) unless every output agrees. ``--difftest-max-ulp N``
sets the default ULP budget for the session. An output that is only rounding noise
fails as :class:`~interop.comparison.NoiseDominatedError` (a ``DiffMismatchError``)
showing the evidence; ``difftest(fn, x, accept_noise=True)`` lets it pass.

Sharded functions (``jax.jit`` with shardings over a mesh, ``shard_map``) are compared with
``difftest(fn, x, sharded=True)``: XLA's partitioned program on the executor's devices against the function on
as many host devices. ``--difftest-devices N`` gives jax's CPU N devices for the session (set before jax
starts its backend; ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` does the same).
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    """Register ``--difftest-max-ulp``."""
    group = parser.getgroup("xla-dialect", "xla_dialect differential testing")
    group.addoption("--difftest-max-ulp", type=int, default=None, metavar="N",
                    help="default ULP budget of the difftest fixture (default: per dtype, see interop.comparison)")
    group.addoption("--difftest-devices", type=int, default=None, metavar="N",
                    help="give jax's CPU N host devices for the session (sharded functions: difftest(fn, x, "
                         "sharded=True) compares with jax.jit on N devices)")


def pytest_configure(config):
    """``--difftest-devices N``: jax's CPU gets N devices, before its backend starts."""
    count = config.getoption("--difftest-devices", default=None)
    if count is None:
        return
    import jax

    try:
        jax.config.update("jax_num_cpu_devices", count)
    except Exception:  # noqa: BLE001 - the backend started already: say how many it has
        pass
    have = len(jax.devices("cpu"))
    if have != count:
        raise pytest.UsageError(f"--difftest-devices {count}: jax's CPU backend started already with {have} "
                                f"devices; set XLA_FLAGS=--xla_force_host_platform_device_count={count} instead")


@pytest.fixture
def difftest(request):
    """``difftest(fn, *args, **options)``: compare ``jax.jit(fn)`` with the NumPy executor; fail on mismatch.

    Returns the :class:`~interop.comparison.DiffReport` when it matches.
    """
    from ..jax.difftest import difftest as run

    default_ulp = request.config.getoption("--difftest-max-ulp", default=None)

    def check(fn, *args, **options):
        __tracebackhide__ = True  # the failure points at the test, not here
        if default_ulp is not None:
            options.setdefault("max_ulp", default_ulp)
        return run(fn, *args, **options).raise_if_mismatch()

    return check


@pytest.fixture
def check_pass():
    """``check_pass(pass_or_pipeline, programs=None, **options)``: fail unless the pass keeps the results of
    generated programs (or yours) on inputs with special values;
    :func:`interop.debugging.pass_testing.assert_preserves_semantics`.

    Returns its :class:`~interop.debugging.pass_testing.PassCheckSummary`.
    """
    from ..debugging.pass_testing import assert_preserves_semantics

    def check(pipeline, programs=None, **options):
        __tracebackhide__ = True  # the failure points at the test, not here
        return assert_preserves_semantics(pipeline, programs, **options)

    return check
