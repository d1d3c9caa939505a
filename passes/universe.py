"""xDSL universe entry point for the passes: ``xdsl-opt -p canonicalize-broadcasts`` knows them.

(The hlo dialect comes from :data:`xla_dialect.universe.HLO_UNIVERSE`; xDSL merges the universes.)

The passes are those of the registry: built-in, installed plugins (entry-point group ``xla_dialect.passes``)
and the files of ``$XLA_PASS_PLUGINS`` (``xdsl-opt`` has no option to load a file), under the names of
:func:`passes.registry.xdsl_opt_name` (``hlo-cse``, ``hlo-dce``, ``hlo-apply-pdl``: xDSL has passes of those
names itself). They are looked up when ``xdsl-opt`` first asks, not when this module is imported.

``xdsl-opt`` does not catch the errors of a pipeline it cannot parse: an unknown pass name is a
``ValueError: Unrecognized passes: [...]`` raised out of ``xDSLOptMain.__init__`` (xDSL's
``PassPipeline.parse_spec``), an unknown option a ``ValueError: Provided arguments [...] not found``, a
failing pass any exception, all printed as a traceback. That code is xDSL's, not ours; when this universe is
loaded by a process named ``xdsl-opt``, :func:`install_error_hook` replaces the traceback of these cases (and of
any :class:`~xla_dialect.errors.XlaError`) by a message (the passes there are, how to load a plugin file, how
options are spelt). The exit status stays 1, Python's for an uncaught exception.
"""

from __future__ import annotations

import os
import sys

from xdsl.universe import Universe

from xla_dialect.errors import XlaError

from .registry import PLUGINS_ENV, universe_passes


def _warn(message: str) -> None:
    print(f"xdsl-opt: warning: {message} (its passes are left out)", file=sys.stderr)


class _PassesUniverse(Universe):
    """A universe whose passes are computed when first read (plugins load then, their errors are warnings)."""

    def __init__(self):
        self._passes = None
        super().__init__()

    @property
    def all_passes(self):
        """Pass name -> factory of the pass class."""
        if self._passes is None:
            self._passes = universe_passes(warn=_warn)
        return self._passes

    @all_passes.setter
    def all_passes(self, value) -> None:
        """Set the passes (an empty dict: compute them on first read)."""
        self._passes = value or None  # (Universe.__init__ sets an empty dict: computed on first read instead)


PASSES_UNIVERSE = _PassesUniverse()
"""Every registered pass (built-in, plugins), under its ``xdsl-opt`` name."""


def _xdsl_opt_message(exc: BaseException) -> str | None:
    """What to print instead of the traceback of ``exc`` in ``xdsl-opt`` (None: keep the traceback)."""
    text = str(exc)
    if isinstance(exc, ValueError) and text.startswith("Unrecognized passes"):
        ours = sorted(PASSES_UNIVERSE.all_passes)
        return (f"xdsl-opt: error: {text}.\n"
                f"  hlo passes here: {', '.join(ours)}\n"
                f"  (cse, dce and apply-pdl are xDSL's own passes here; ours are hlo-cse, hlo-dce, hlo-apply-pdl, "
                f"names xla-opt accepts too)\n"
                f"  A pass from a Python file: {PLUGINS_ENV}=my_pass.py xdsl-opt ... (files or module names, "
                f"'{os.pathsep}'-separated); installed plugins (entry-point group xla_dialect.passes) are found "
                f"without it.")
    if isinstance(exc, ValueError) and text.startswith("Provided arguments"):  # xDSL's unknown pass option
        return (f"xdsl-opt: error: a pass option: {text} (pipelines spell options with dashes, "
                f"canonicalize-broadcasts{{max-splat-elements=8}}; xla-opt --list-passes lists each pass's options)")
    if isinstance(exc, XlaError):
        return f"xdsl-opt: error: {text}"
    return None


def install_error_hook() -> None:
    """Print :func:`_xdsl_opt_message` instead of a traceback for uncaught errors it knows (see the module doc)."""
    previous = sys.excepthook

    def hook(kind, exc, tb):
        message = _xdsl_opt_message(exc)
        if message is None:
            previous(kind, exc, tb)
        else:
            print(message, file=sys.stderr)

    sys.excepthook = hook


if os.path.basename(sys.argv[0] if sys.argv else "") == "xdsl-opt":
    install_error_hook()
