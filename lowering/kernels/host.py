"""The properties of the host CPU that decide how XLA CPU computes some floats.

XLA's CPU compiler is LLVM targeting the host (``-mcpu=native``), so a few
results depend on the instructions the host has:

* ``avx``, ``avx512f``: which reciprocal-square-root estimate XLA's ``rsqrt``
  starts from (:mod:`lowering.kernels.cpu_rsqrt`);
* ``vendor``: how many Newton steps refine it (AMD's and Intel's estimate
  tables differ);
* ``avx512fp16``: whether f16 arithmetic is native, in which case LLVM also
  contracts f16 multiply-adds into one f16 FMA (rounded once), as it does for
  f32 and f64 (:mod:`passes.fma_contraction`); without it f16 is computed in
  f32 and rounded after each op;
* ``avx512bf16`` with ``amx_bf16`` (:func:`native_bf16`): whether LLVM computes bf16 natively in the code of
  the while loops XLA compiles whole, rounding f32 to bf16 with the hardware conversion, which flushes denormal
  inputs to zero (:mod:`passes.small_loops`);
* ``avx2``, ``fma``, ``avx512bw``, ``avx512dq``, ``avx512vl`` (with ``avx512f``):
  which YNNPACK dot kernels XLA CPU chooses among, so in which order small
  products are summed (:mod:`lowering.kernels.small_dot`);
* ``amx_bf16`` (LLVM's ``amx-bf16``): whether YNNPACK may run bf16 products on the AMX tile unit, whose
  ``tdpbf16ps`` sums in its own order (:data:`lowering.kernels.small_dot.AMX_TILES`).

Read once per process, from LLVM's own view of the host (llvmlite, the LLVM
numba is built on) and ``/proc/cpuinfo`` for the vendor string.
"""

from __future__ import annotations

import functools


@functools.cache
def host_properties() -> dict[str, object]:
    """``avx``, ``avx2``, ``fma``, ``avx512f``, ``avx512bw``, ``avx512dq``, ``avx512vl``, ``avx512fp16``,
    ``avx512bf16`` (bools, as LLVM sees this CPU) and ``vendor`` (CPUID's string)."""
    from llvmlite import binding

    features = binding.get_host_cpu_features()
    vendor = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    vendor = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    flags = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512fp16", "avx512bf16")
    return {**{name: bool(features.get(name)) for name in flags}, "amx_bf16": bool(features.get("amx-bf16")),
            "vendor": vendor}


def describe_host() -> str:
    """One line naming the host properties above (for reports and test skip reasons)."""
    host = host_properties()
    flags = [name for name in ("avx", "avx512f", "avx512fp16", "amx_bf16") if host[name]]
    return f"{host['vendor'] or 'unknown vendor'} ({', '.join(flags) or 'no AVX'})"


def native_bf16() -> bool:
    """Whether XLA CPU's LLVM computes bf16 values natively in the while loops XLA compiles whole: ``bfloat``
    instructions, rounded from f32 with AVX512-BF16's conversion (which flushes a denormal to zero) and multiply-adds
    contracted (:mod:`passes.small_loops`). Measured on an Intel Xeon (Emerald Rapids, AMX-BF16): yes, but no
    with ``--xla_cpu_max_isa=AVX512_BF16``, which turns AMX off (XLA's target is then Cooper Lake); on an AMD EPYC
    (Zen 5: AVX512-BF16, no AMX): no, XLA's object code rounds with integer instructions and keeps denormals. So:
    hosts with AVX512-BF16 and AMX-BF16 (XLA's ``sapphirerapids`` target and later)."""
    host = host_properties()
    return bool(host["avx512bf16"]) and bool(host["amx_bf16"])


def prefers_wide_vectors() -> bool:
    """Whether LLVM vectorizes with 64-byte vectors where XLA CPU leaves the width to it (the dots of the while
    loops XLA compiles whole, :mod:`passes.small_loops`): AVX-512 on a CPU that LLVM does not tune for 32-byte
    vectors. LLVM tunes Intel's AVX-512 cores (Skylake-X to Emerald Rapids) for 32-byte vectors and AMD's Zen 4
    for 64-byte ones; measured: those loops' dots follow 64-byte vectors on an AMD EPYC (Zen 4) and 32-byte ones on
    an Intel Xeon (Emerald Rapids)."""
    host = host_properties()
    return bool(host["avx512f"]) and host["vendor"] != "GenuineIntel"


def measured_host() -> bool:
    """Whether this CPU has what the host the orders of :func:`lowering.kernels.small_dot._xla_order` were measured on has: XLA CPU's choice of
    kernels (YNNPACK's AVX-512 ones among them) depends on it."""
    host = host_properties()
    return all(host[name] for name in ("avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"))
