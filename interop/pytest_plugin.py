"""pytest plugin (entry point ``pytest11``): the ``difftest`` fixture and its ``--difftest-max-ulp`` option.

With the package installed, every test session has it::

    def test_model(difftest):
        difftest(model_fn, x)              # fails the test on a mismatch, showing the report

    def test_loose(difftest):
        report = difftest(fn, x, max_ulp=16, atol=1e-6)
        assert report.outputs[0].comparison.max_ulp <= 16

The fixture calls :func:`interop.difftest.difftest` and raises
:class:`~interop.difftest.DiffMismatchError` (a test failure that prints the
per-output table; its first line, which pytest's short summary shows, names
the outputs that differ) unless every output agrees. ``--difftest-max-ulp N``
sets the default ULP budget for the session. An output that is only rounding noise
fails as :class:`~interop.difftest.NoiseDominatedError` (a ``DiffMismatchError``)
showing the evidence; ``difftest(fn, x, accept_noise=True)`` lets it pass.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    """Register ``--difftest-max-ulp``."""
    group = parser.getgroup("xla-dialect", "xla_dialect differential testing")
    group.addoption("--difftest-max-ulp", type=int, default=None, metavar="N",
                    help="default ULP budget of the difftest fixture (default: per dtype, see interop.difftest)")


@pytest.fixture
def difftest(request):
    """``difftest(fn, *args, **options)``: compare ``jax.jit(fn)`` with the NumPy executor; fail on mismatch.

    Returns the :class:`~interop.difftest.DiffReport` when it matches.
    """
    from .difftest import difftest as run

    default_ulp = request.config.getoption("--difftest-max-ulp", default=None)

    def check(fn, *args, **options):
        __tracebackhide__ = True  # the failure points at the test, not here
        if default_ulp is not None:
            options.setdefault("max_ulp", default_ulp)
        return run(fn, *args, **options).raise_if_mismatch()

    return check
