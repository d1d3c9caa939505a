"""The options of ``lowering.compile``, resolved and validated once: :class:`CompileOptions`.

``lowering.compile(module, entry, options=CompileOptions(...))`` and the keyword shortcuts
``lowering.compile(module, denormals="keep", ...)`` are the same call: the keywords build (or replace fields
of) the options object. Every automatic default is resolved when the object is made -- the environment read
there, once (``$XLA_DIALECT_LOOP_COMPILATION``, ``$XLA_DIALECT_FUSION``, ``$XLA_DIALECT_MAX_BYTES``, the BLAS
thread variables, ``$XLA_DIALECT_EXECUTABLE_CACHE``) -- so the executor, its context and the kernels read settled
values: ``denormals`` is "flush" or "keep", ``flush`` the same as a bool, ``loop_compilation`` and ``fusion`` one of their modes,
``max_bytes`` a byte count. A bad value raises the project's exception naming the option (``ExecutionError``
or ``UnsupportedError``, as before). What each option means: :func:`lowering.executor.executable.compile`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from xla_dialect.errors import ExecutionError, UnsupportedError

MODES = ("auto", "always", "never")
"""The modes of ``loop_compilation`` and ``fusion`` (None: the environment's, :func:`resolve_mode`)."""

ARGUMENT_CONVERSIONS = ("exact", "lossless", "cast")
"""What a call does with an argument of another dtype (``argument_conversion``)."""


@dataclass(frozen=True)
class CompileOptions:
    """``lowering.compile``'s options, resolved on construction (see the module docstring).

    ``CompileOptions(denormals=None).denormals`` is "flush" or "keep"; resolving a resolved object again
    changes nothing, so ``dataclasses.replace`` and :meth:`with_` give resolved objects too."""

    num_replicas: int = 1
    num_partitions: int = 1
    blas_threads: int | None = None
    """As given: None is automatic (the thread count used is :attr:`blas_thread_count`)."""
    denormals: str | None = None
    xla_rewrites: bool = True
    fma_contraction: bool = True
    loop_compilation: str | None = None
    fusion: str | None = None
    argument_conversion: str = "exact"
    max_bytes: int | str | None = None
    timeout: float | None = None
    executable_cache: bool | None = None
    """Whether the executable is loaded from and stored in the cache of compiled programs
    (:mod:`lowering.executor.executable_cache`); None: ``$XLA_DIALECT_EXECUTABLE_CACHE`` (``0``, ``off``, ``false``
    or ``no``: off), else on."""
    probe: Any = field(default=None, compare=False)
    """An object recording intermediate values (``register``/``record``); with it, fusion and loop
    compilation are "never"."""

    blas_thread_count: int | None = field(default=None, init=False)
    """The BLAS thread count the float matmuls run with (None: the BLAS as configured; :mod:`lowering.runtime.blas`)."""
    split_workers: int = field(default=1, init=False)
    """CPUs a large float matmul is split over (:func:`lowering.runtime.blas.resolve_split_workers`)."""

    def __post_init__(self) -> None:
        from xla_dialect.limits import default_max_bytes, parse_bytes

        from .blas import resolve_blas_threads, resolve_split_workers
        from .denormals import resolve_denormals

        def put(name, value):
            object.__setattr__(self, name, value)

        for what in ("num_replicas", "num_partitions"):
            count = getattr(self, what)
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise ExecutionError(f"lowering.compile: {what} must be a positive int, got {count!r}")
        put("blas_thread_count", resolve_blas_threads(self.blas_threads))
        put("split_workers", resolve_split_workers(self.blas_threads))
        put("denormals", resolve_denormals(self.denormals))
        put("loop_compilation", resolve_mode("loop_compilation", self.loop_compilation,
                                             "XLA_DIALECT_LOOP_COMPILATION"))
        put("fusion", resolve_mode("fusion", self.fusion, "XLA_DIALECT_FUSION"))
        if self.probe is not None:  # every op as its own kernel, each loop iteration in Python
            put("loop_compilation", "never")
            put("fusion", "never")
        if self.executable_cache is None:
            import os

            setting = os.environ.get("XLA_DIALECT_EXECUTABLE_CACHE", "1").strip().lower()
            if setting not in ("", "1", "on", "true", "yes", "0", "off", "false", "no", "roundtrip"):
                raise UnsupportedError(f"$XLA_DIALECT_EXECUTABLE_CACHE must be 1/on or 0/off (or roundtrip, for "
                                       f"testing the stored form), got {setting!r}")
            put("executable_cache", setting not in ("0", "off", "false", "no"))
        for what in ("xla_rewrites", "fma_contraction", "executable_cache"):
            if not isinstance(getattr(self, what), bool):
                raise ExecutionError(f"lowering.compile: {what} must be True or False, got {getattr(self, what)!r}")
        timeout = self.timeout
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout > 0):
            raise ExecutionError(f"lowering.compile: timeout must be a positive number of seconds, got {timeout!r}")
        put("max_bytes", default_max_bytes() if self.max_bytes is None
            else parse_bytes(self.max_bytes, "lowering.compile: max_bytes"))
        if self.argument_conversion not in ARGUMENT_CONVERSIONS:
            raise ExecutionError(f"lowering.compile: argument_conversion must be one of "
                                 f"{', '.join(ARGUMENT_CONVERSIONS)}, got {self.argument_conversion!r}")

    @property
    def flush(self) -> bool:
        """Whether denormals are flushed as XLA CPU does (``denormals == "flush"``)."""
        return self.denormals == "flush"

    def with_(self, **changes) -> CompileOptions:
        """These options with ``changes`` (keyword shortcuts of ``lowering.compile``), resolved."""
        if not changes:
            return self
        names = {f.name for f in dataclasses.fields(self) if f.init}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise TypeError(f"lowering.compile got unexpected keyword argument(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, options: CompileOptions | None = None, **changes) -> CompileOptions:
        """``options`` (default: every default) with the keyword shortcuts ``changes``."""
        if options is not None and not isinstance(options, CompileOptions):
            raise ExecutionError(f"lowering.compile: options must be a lowering.runtime.options.CompileOptions, "
                                 f"got {type(options).__name__}")
        if options is None:
            return cls(**changes) if changes else cls()
        return options.with_(**changes)


def resolve_mode(option: str, mode: str | None, variable: str) -> str:
    """Validate ``lowering.compile``'s ``loop_compilation`` or ``fusion`` option: one of :data:`MODES`, or None for
    the environment variable ``variable`` (else "auto"); anything else raises ``UnsupportedError`` naming it."""
    import os

    if mode is None:
        mode = os.environ.get(variable, "auto")
    if mode not in MODES:
        raise UnsupportedError(f"lowering.compile: {option} must be one of {', '.join(MODES)}, got {mode!r}")
    return mode
