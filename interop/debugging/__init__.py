"""Numerics debugging: where and why two runs of a program differ.

- :func:`random_inputs`: generated arguments of a program's parameter types, special values mixed in on
  request (``xla-run --random-inputs``).
- :func:`trace`: every intermediate value of a run, by op, with its source location
  (``xla-run --dump-intermediates``).
"""

from .probes import Trace, TracedValue, trace
from .random_inputs import random_inputs, special_values_of

__all__ = ["Trace", "TracedValue", "random_inputs", "special_values_of", "trace"]
