"""JAX programs: import them into the hlo dialect (functions, ``Lowered``, ``Exported``, serialized exports),
test them against ``jax.jit`` (:func:`difftest`, its pytest fixture in :mod:`interop.tools.pytest_plugin`), and
run sharded ones as XLA partitions them (:func:`compile_sharded`)."""

from .difftest import difftest
from .importer import import_jax
from .sharded import ShardedExecutable, compile_sharded

__all__ = ["ShardedExecutable", "compile_sharded", "difftest", "import_jax"]
