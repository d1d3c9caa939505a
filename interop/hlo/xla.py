"""Run HLO text on XLA's CPU backend (jaxlib): the reference for programs read from HLO text.

jaxlib parses the text (``hlo_module_from_text``), converts the module to StableHLO and compiles
it. That route loses layouts, so optimized modules (fusions, bitcasts) are first printed in the
form XLA compiles from text (:func:`~interop.hlo.exporter.export_hlo` with ``for_xla=True``).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from xla_dialect.errors import ExecutionError, HloParseError

from .exporter import export_hlo


@lru_cache(maxsize=32)
def _compile(text: str):
    import jax
    from jax._src.lib import xla_client
    from jax.extend import backend as jex_backend

    try:
        module = xla_client.hlo.hlo_module_from_text(text)
    except Exception as e:
        raise HloParseError(f"XLA's HLO parser rejects the text: {str(e).strip().splitlines()[0]}") from None
    try:
        stablehlo = xla_client._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
        client = jex_backend.get_backend("cpu")
        options = jex_backend.get_compile_options(num_replicas=1, num_partitions=1)
        return client.compile_and_load(stablehlo, jax.devices("cpu")[:1], options)
    except Exception as e:
        raise ExecutionError(f"XLA could not compile the HLO module: {str(e).strip().splitlines()[0]}") from None


def run_hlo_text_on_xla(text: str, *arrays) -> tuple[np.ndarray, ...]:
    """Compile HLO module text with XLA's CPU backend and run it on NumPy arrays (tuple results flattened)."""
    import jax

    from ..xla_run import _x64

    executable = _compile(text)
    device = jax.devices("cpu")[0]
    with _x64():
        buffers = [jax.device_put(np.asarray(a), device) for a in arrays]
    try:
        outputs = executable.execute(buffers)
    except Exception as e:
        raise ExecutionError(f"XLA execution failed: {e}") from None
    return tuple(np.asarray(o) for o in outputs)


def run_hlo_on_xla(module, *arrays) -> tuple[np.ndarray, ...]:
    """Run an hlo module on XLA through HLO text (``export_hlo(module, for_xla=True)``)."""
    return run_hlo_text_on_xla(export_hlo(module, for_xla=True), *arrays)
