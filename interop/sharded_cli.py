"""``xla-run`` of sharded programs: a serialized sharded ``jax.export`` runs partitioned over its devices.

:func:`sharded_export` tells a serialized export of more than one device from the other program files;
:func:`run_sharded_export` runs it as :func:`interop.compile_sharded` does (XLA's partitioned per-device
program, one program per device), threaded or over MPI (``mpiexec -n P xla-run ...``: every rank loads the
same files, runs its block of devices, rank 0 prints and writes ``--output``). Arguments and results are the
export's flat global arrays (``arg0, arg1, ...`` in ``--inputs``, ``result0, ...`` in ``--output``), as
jax.jit of ``Exported.call`` takes and gives them.
"""

from __future__ import annotations

import sys

import numpy as np

from xla_dialect.errors import UnsupportedError, XlaError

__all__ = ["sharded_export", "run_sharded_export", "set_host_device_count"]


def sharded_export(data: bytes, trusted: bool = False):
    """The ``jax.export.Exported`` that ``data`` serializes when it runs on more than one device, else None
    (another program format, or a one-device export: the ordinary loader reads those)."""
    from .hlo.syntax import is_hlo_text
    from .stablehlo_parse import _BYTECODE_MAGIC

    if is_hlo_text(data) or data.startswith(_BYTECODE_MAGIC):
        return None
    try:
        data.decode("utf-8")
        return None  # MLIR or other text
    except UnicodeDecodeError:
        pass
    import jax

    try:
        exported = jax.export.deserialize(bytearray(data))
    except Exception:  # noqa: BLE001 - not an export: the ordinary loader gives its error
        return None
    if exported.nr_devices <= 1:
        return None
    if not trusted:
        from .bytecode_check import check_in_subprocess

        check_in_subprocess(bytes(exported.mlir_module_serialized))
    return exported


def set_host_device_count(count: int) -> None:
    """Give jax's CPU ``count`` devices (before its backend starts); an error saying how when it has started
    with fewer."""
    import jax

    try:
        jax.config.update("jax_num_cpu_devices", count)
    except Exception:  # noqa: BLE001 - the backend is up already: check what it has
        pass
    have = len(jax.devices("cpu"))
    if have < count:
        raise UnsupportedError(f"the program runs on {count} devices, jax's CPU has {have}: set "
                               f"XLA_FLAGS=--xla_force_host_platform_device_count={count} before jax starts")


def run_sharded_export(exported, args, inputs, report: dict) -> int:
    """Run ``exported`` on ``inputs`` (flat global arrays, or None) for ``xla-run``'s parsed ``args``; returns
    the exit status. Under MPI only rank 0 prints and writes files."""
    import jax

    from .cli import _describe, _result_summary
    from .sharded import compile_sharded, resolve_backend

    count = exported.nr_devices
    set_host_device_count(count)
    backend = resolve_backend(args.backend)
    if args.check_xla or args.dump_intermediates or args.random_inputs or args.show_source or args.entry != "main":
        used = [flag for flag, on in (("--check-xla", args.check_xla), ("--dump-intermediates", args.dump_intermediates),
                                      ("--random-inputs", args.random_inputs), ("--show-source", args.show_source),
                                      ("--entry", args.entry != "main")) if on]
        raise UnsupportedError(f"{', '.join(used)}: not supported for a sharded program (an export of {count} "
                               "devices); interop.compile_sharded in Python gives the per-device values")
    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in exported.in_avals]
    if inputs is None:
        if avals:
            raise XlaError(f"the program takes {len(avals)} arguments; give them with --inputs FILE.npz (arrays "
                           "named arg0, arg1, ... : the export's flat global arguments)")
        inputs = []
    if len(inputs) != len(avals):
        raise XlaError(f"--inputs has {len(inputs)} arrays; the export takes {len(avals)} "
                       f"({', '.join(f'{a.dtype}{list(a.shape)}' for a in avals)})")
    example_args, example_kwargs = jax.tree.unflatten(exported.in_tree, avals)
    call_args, call_kwargs = jax.tree.unflatten(exported.in_tree, list(inputs))
    exe = compile_sharded(exported, *example_args, trusted=True, backend=backend, timeout=args.timeout,
                          **example_kwargs)
    rank = exe.runner.rank if exe.runner is not None else 0
    where = (f"{exe.num_devices} devices on {exe.runner.size} MPI ranks" if exe.runner is not None
             else f"{exe.num_devices} devices (threads)")
    results = jax.tree.leaves(exe(*call_args, **call_kwargs))
    if rank != 0:
        return 0
    print(f"sharded program: {exe.num_replicas} replicas x {exe.num_partitions} partitions, {where}")
    if args.memory:
        print(exe.memory_report().text())
    if args.output:
        np.savez(args.output, **{f"result{i}": np.asarray(r) for i, r in enumerate(results)})
    report["results"] = [_result_summary(i, r) for i, r in enumerate(results)]
    report["status"] = "ok"
    report["devices"] = exe.num_devices
    report["backend"] = backend
    for i, r in enumerate(results):
        print(f"result #{i}: {_describe(r)}")
        print(np.array2string(r, threshold=200))
    sys.stdout.flush()
    return 0
