"""Numerics debugging: where and why two runs of a program differ.

- :func:`random_inputs`: generated arguments of a program's parameter types, special values mixed in on
  request (``xla-run --random-inputs``).
- :func:`trace`: every intermediate value of a run, by op, with its source location
  (``xla-run --dump-intermediates``).
- :func:`find_divergence`: the first op whose value differs beyond its budget between two runs (a float64
  shadow, other compile options, XLA CPU, values dumped elsewhere); ``xla-diverge``.
- :func:`check_semantics`: the first pass of a pipeline that changes a program's results, and the op
  (``xla-opt --check-semantics``); :mod:`interop.debugging.pass_testing` tests a pass with it on generated
  programs (the ``check_pass`` fixture).
- :func:`reduce_program`: the smallest program a test still finds interesting (a crash, a mismatch with XLA,
  a pass that changes results, any command); ``xla-reduce``.
- :func:`emulate_device`: f32 dots and convolutions computed as TPUs (bfloat16 passes) or GPUs (TF32) do for
  their precision; ``trace(..., device=)``, ``find_divergence(..., against={"device": "tpu"})``.
"""

from .bisection import SemanticsReport, check_semantics
from .device_numerics import emulate_device
from .divergence import Divergence, DivergenceReport, find_divergence, widen_to_f64
from .probes import Probe, Trace, TracedValue, trace
from .random_inputs import random_inputs, special_values_of
from .reducer import ReduceResult, reduce_program

__all__ = ["Divergence", "DivergenceReport", "Probe", "ReduceResult", "SemanticsReport", "Trace", "TracedValue",
           "check_semantics", "emulate_device", "find_divergence", "random_inputs", "reduce_program",
           "special_values_of", "trace", "widen_to_f64"]
