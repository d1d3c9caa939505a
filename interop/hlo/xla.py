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


_CHILD = """
import sys
text = sys.stdin.buffer.read().decode("utf-8")
from jaxlib import xla_client
try:
    module = xla_client.hlo.hlo_module_from_text(text)
except Exception as e:
    sys.stdout.buffer.write(b"P" + " ".join(str(e).strip().splitlines()[:3]).encode("utf-8", "replace"))
    sys.exit(0)
try:
    stablehlo = xla_client._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
except Exception as e:
    sys.stdout.buffer.write(b"C" + (str(e).strip().splitlines() or [type(e).__name__])[0].encode("utf-8", "replace"))
    sys.exit(0)
sys.stdout.buffer.write(b"K" + bytes(stablehlo))
"""


def _crash_detail(stderr: bytes) -> str:
    """The first ``Check failed`` (or fatal log) line of a crashed jaxlib's stderr, if any."""
    for line in stderr.decode("utf-8", "replace").splitlines():
        if "Check failed" in line or line.startswith("F"):
            return line.split("] ", 1)[-1].strip()[:300]
    return ""


def _to_stablehlo_in_subprocess(text: str, source: str, timeout: float = 120.0) -> bytes:
    """Parse HLO text with jaxlib's parser and convert it to StableHLO in a child process: jaxlib's C++
    HLO parser aborts the whole process on some text (a CHECK such as ``token[2]`` in a computation's
    header), so a crash there becomes an :class:`HloParseError` here. Returns the StableHLO bytecode."""
    import os
    import subprocess
    import sys

    from ..processes import CHILD_GUARD

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        done = subprocess.run([sys.executable, "-c", CHILD_GUARD + _CHILD, str(os.getpid())],
                              input=text.encode("utf-8"), capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise HloParseError(f"{source}: XLA's HLO parser did not finish in {timeout:g} s") from None
    out = done.stdout
    if done.returncode != 0 or not out:
        reason = f"signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
        detail = _crash_detail(done.stderr)
        raise HloParseError(f"{source}: jaxlib's HLO parser crashed reading this text ({reason})"
                            + (f": {detail}" if detail else "")
                            + "; the text is malformed in a way XLA's parser does not diagnose")
    kind, body = out[:1], out[1:]
    if kind == b"P":
        raise HloParseError(f"{source}: XLA's HLO parser rejects the text: {body.decode('utf-8', 'replace')}")
    if kind == b"C":
        raise ExecutionError(f"{source}: XLA could not convert the HLO module to StableHLO: "
                             f"{body.decode('utf-8', 'replace')}")
    return body


@lru_cache(maxsize=32)
def _compile(text: str, trusted: bool = False, source: str = "<HLO text>"):
    import jax
    from jax._src.lib import xla_client
    from jax.extend import backend as jex_backend

    if trusted:
        try:
            module = xla_client.hlo.hlo_module_from_text(text)
        except Exception as e:
            raise HloParseError(f"{source}: XLA's HLO parser rejects the text: "
                                f"{' '.join(str(e).strip().splitlines()[:3])}") from None
        try:
            stablehlo = xla_client._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
        except Exception as e:
            raise ExecutionError(f"{source}: XLA could not convert the HLO module to StableHLO: "
                                 f"{str(e).strip().splitlines()[0]}") from None
    else:
        stablehlo = _to_stablehlo_in_subprocess(text, source)
    try:
        client = jex_backend.get_backend("cpu")
        options = jex_backend.get_compile_options(num_replicas=1, num_partitions=1)
        return client.compile_and_load(stablehlo, jax.devices("cpu")[:1], options)
    except Exception as e:
        raise ExecutionError(f"XLA could not compile the HLO module: {str(e).strip().splitlines()[0]}") from None


def run_hlo_text_on_xla(text: str, *arrays, trusted: bool = False, source: str = "<HLO text>") -> tuple[np.ndarray, ...]:
    """Compile HLO module text with XLA's CPU backend and run it on NumPy arrays (tuple results flattened).

    jaxlib's HLO parser aborts the process on some malformed text, so unless ``trusted`` the text is parsed
    (and converted to StableHLO) in a child process first (about 0.6 s, once per text); a crash there is an
    :class:`HloParseError` naming ``source``."""
    import jax

    from ..stablehlo.xla import _x64

    executable = _compile(text, trusted, source)
    device = jax.devices("cpu")[0]
    with _x64():
        buffers = [jax.device_put(np.asarray(a), device) for a in arrays]
    try:
        outputs = executable.execute(buffers)
    except Exception as e:
        raise ExecutionError(f"XLA execution failed: {e}") from None
    return tuple(np.asarray(o) for o in outputs)


def run_hlo_on_xla(module, *arrays, trusted: bool = False, source: str = "<hlo module>") -> tuple[np.ndarray, ...]:
    """Run an hlo module on XLA through HLO text (``export_hlo(module, for_xla=True)``), guarded as
    :func:`run_hlo_text_on_xla` is unless ``trusted``."""
    return run_hlo_text_on_xla(export_hlo(module, for_xla=True), *arrays, trusted=trusted, source=source)
