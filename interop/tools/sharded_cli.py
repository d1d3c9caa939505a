"""``xla-run`` of sharded programs: a serialized sharded ``jax.export`` and XLA's partitioned HLO text run
partitioned over their devices.

:func:`sharded_export` tells a serialized export of more than one device from the other program files;
:func:`run_sharded_export` runs it as :func:`interop.compile_sharded` does (XLA's partitioned per-device
program, one program per device), threaded or over MPI (``mpiexec -n P xla-run ...``: every rank loads the
same files, runs its block of devices, rank 0 prints and writes ``--output``). Arguments and results are the
export's flat global arrays (``arg0, arg1, ...`` in ``--inputs``, ``result0, ...`` in ``--output``), as
jax.jit of ``Exported.call`` takes and gives them.

:func:`run_partitioned_hlo` runs XLA's per-device HLO text (``num_partitions`` / ``replica_count`` in its
header, as ``jitted.lower(...).compile().as_text()`` prints it): whole input values are split by each entry
parameter's ``sharding=``; the text names no output shardings, so each device's results are written.
"""

from __future__ import annotations

import re
import sys

import numpy as np

from xla_dialect.errors import UnsupportedError, XlaError

from .command_io import describe, result_summary

__all__ = ["assemble_result", "parse_sharding", "partition_grid", "partition_stablehlo", "run_partitioned_hlo",
           "run_sharded_export", "set_host_device_count", "sharded_export", "split_argument", "stablehlo_grid"]


def sharded_export(data: bytes, trusted: bool = False):
    """The ``jax.export.Exported`` that ``data`` serializes when it runs on more than one device, else None
    (another program format, or a one-device export: the ordinary loader reads those)."""
    from ..hlo.syntax import is_hlo_text
    from ..stablehlo.bytecode import MAGIC as _BYTECODE_MAGIC

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
        from ..stablehlo.bytecode_check import check_in_subprocess

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

    from ..jax.sharded import compile_sharded, resolve_backend

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
    report["results"] = [result_summary(i, r) for i, r in enumerate(results)]
    report["status"] = "ok"
    report["devices"] = exe.num_devices
    report["backend"] = backend
    for i, r in enumerate(results):
        print(f"result #{i}: {describe(r)}")
        print(np.array2string(r, threshold=200))
    sys.stdout.flush()
    return 0


# ----------------------------------------------------------------------------
# XLA's partitioned HLO text (num_partitions / replica_count > 1)
# ----------------------------------------------------------------------------

_TILED = re.compile(r"^\{devices=\[([\d,]+)\](?:<=\[([\d,]+)\](?:T\(([\d,]+)\))?|([\d,]+))"
                    r"\s*(last_tile_dim_replicate|last_tile_dims=\{([^}]*)\})?\s*(?:metadata=\{[^}]*\})?\s*\}$")


def partition_grid(text: str) -> tuple[int, int]:
    """``(replica_count, num_partitions)`` of an HLO module text's header (1 where it says nothing)."""
    from ..jax.sharded import _header_count

    return _header_count(text, "replica_count"), _header_count(text, "num_partitions")


def parse_sharding(text: str):
    """An HLO sharding of an array (``{replicated}``, ``{maximal device=d}``, ``{devices=[2,2]<=[4]}``,
    ``{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}``, ``{devices=[2,2]0,2,1,3}``, ...) as
    ``None`` (replicated) or ``(tile counts per dimension, device ids array of the tile grid)``, whose
    trailing dimension (if any past the array's rank) replicates."""
    text = text.strip()
    if text in ("{replicated}", "{}"):
        return None
    if text.startswith("{maximal"):
        raise UnsupportedError(f"sharding {text}: a value on one device only; expected tiled or replicated")
    m = _TILED.match(text)
    if m is None:
        raise UnsupportedError(f"sharding {text}: not supported for an entry parameter (expected {{replicated}} or "
                               "{devices=[...]...} tiles)")
    tiles = [int(t) for t in m.group(1).split(",")]
    if m.group(2) is not None:
        dims = [int(t) for t in m.group(2).split(",")]
        ids = np.arange(int(np.prod(dims))).reshape(dims)
        if m.group(3) is not None:
            ids = ids.transpose([int(t) for t in m.group(3).split(",")])
    else:
        ids = np.array([int(t) for t in m.group(4).split(",")])
    if ids.size != int(np.prod(tiles)):
        raise UnsupportedError(f"sharding {text}: {ids.size} devices for tiles {tiles}")
    replicated = 0
    if m.group(5) == "last_tile_dim_replicate":
        replicated = 1
    elif m.group(6) is not None:
        kinds = [k.strip() for k in m.group(6).split(",")]
        if any(k != "replicated" for k in kinds):
            raise UnsupportedError(f"sharding {text}: subgroups {kinds}; only replicated ones are supported")
        replicated = len(kinds)
    return tiles[:len(tiles) - replicated], ids.reshape(tiles)


def stablehlo_grid(data: bytes) -> tuple[int, int]:
    """``(num_replicas, num_partitions)`` a StableHLO module (text or bytecode) declares in its
    ``mhlo.num_replicas`` / ``mhlo.num_partitions`` attributes, as jax writes them for a sharded program; (1, 1)
    where it declares none."""
    from ..stablehlo.bytecode import MAGIC as _BYTECODE_MAGIC

    if b"mhlo.num_partitions" not in data and b"mhlo.num_replicas" not in data:
        return 1, 1
    if not data.startswith(_BYTECODE_MAGIC):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:  # (another format: a serialized export embeds its module's bytecode)
            return 1, 1
    text = _stablehlo_text(data)
    header = next((line for line in text.splitlines() if line.lstrip().startswith("module")), "")  # (its attributes)
    counts = {k: int(v) for k, v in re.findall(r"mhlo\.(num_replicas|num_partitions)\s*=\s*(\d+)", header)}
    return counts.get("num_replicas", 1), counts.get("num_partitions", 1)


def _stablehlo_text(data: bytes) -> str:
    """A StableHLO module as MLIR text: text as it is; bytecode (a portable artifact, as ``jax.export`` serializes
    it, or plain MLIR bytecode) read by :func:`interop.stablehlo.parse.parse_mlir` (its malformed-input check
    first) and printed."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        from ..stablehlo.parse import parse_mlir

        return str(parse_mlir(data))


def partition_stablehlo(data: bytes, replicas: int, partitions: int) -> tuple[str, list[str]]:
    """XLA's partitioned per-device HLO text of a sharded StableHLO module (its shardings: ``sdy`` or
    ``mhlo.sharding``, ``sdy.manual_computation`` bodies of shard_map) and the HLO sharding of each result:
    jaxlib compiles it for ``replicas x partitions`` host CPU devices, as jax.jit of the program would, and hands
    out the per-device program it made (no partitioning is done here)."""
    import jax
    import numpy as np

    from ..jax.sharded import _printed_module

    set_host_device_count(replicas * partitions)
    try:
        from jax._src import compiler
        from jax._src.interpreters import mlir
        from jax._src.lib import xla_client

        devices = jax.devices("cpu")[:replicas * partitions]
        backend = devices[0].client
        options = compiler.get_compile_options(num_replicas=replicas, num_partitions=partitions,
                                               device_assignment=np.array(devices).reshape(replicas, partitions),
                                               backend=backend)
        with mlir.make_ir_context():
            module = mlir.ir.Module.parse(_stablehlo_text(data))
            executable = compiler.backend_compile_and_load(backend, module, xla_client.DeviceList(tuple(devices)),
                                                           options, [])
        (hlo,) = executable.hlo_modules()
        shardings = executable.get_output_shardings() or []
        return _printed_module(hlo), [str(xla_client.HloSharding.from_proto(s)) for s in shardings]
    except XlaError:
        raise
    except Exception as e:  # noqa: BLE001 - jaxlib's refusal, kept whole
        raise XlaError(f"a sharded StableHLO program ({replicas} replicas x {partitions} partitions): jaxlib could "
                       f"not compile it for the host devices: {type(e).__name__}: {e}") from e


def assemble_result(values: list[np.ndarray], sharding: str, partitions: int, what: str) -> np.ndarray:
    """The global value of one result from each device's value (``values[d]``, device ``d`` = replica
    ``d // partitions``, partition ``d % partitions``) by its HLO ``sharding``: tiles placed where the sharding
    puts them; devices holding the same tile (replicas, replicated tile dimensions) must agree bit for bit."""
    parsed = parse_sharding(sharding) if not sharding.startswith("{maximal") else None
    shard = values[0]
    if parsed is None:
        tiles, ids = [1] * shard.ndim, None
    else:
        tiles, ids = parsed
    out = np.empty(tuple(s * t for s, t in zip(shard.shape, tiles)), shard.dtype)
    filled: dict[tuple, int] = {}
    for d, v in enumerate(values):
        if ids is None:
            where = (0,) * shard.ndim
        else:
            found = np.argwhere(ids == d % partitions)
            if not len(found):
                continue
            where = tuple(int(i) for i in found[0][:len(tiles)])
        index = tuple(slice(i * s, (i + 1) * s) for i, s in zip(where, shard.shape))
        if where in filled:
            if out[index].tobytes() != np.ascontiguousarray(v).tobytes():
                raise XlaError(f"{what}: devices {filled[where]} and {d} hold the same tile {list(where)} of sharding "
                               f"{sharding} with different bits")
            continue
        out[index] = v
        filled[where] = d
    if len(filled) != int(np.prod(tiles)):
        raise XlaError(f"{what}: sharding {sharding} places {int(np.prod(tiles))} tiles; the devices hold "
                       f"{len(filled)}")
    return out


def split_argument(value: np.ndarray, shard_shape: tuple, sharding, partition: int, what: str) -> np.ndarray:
    """The shard of the global ``value`` that ``partition`` holds under ``sharding`` (:func:`parse_sharding`);
    ``value`` of the shard's own shape is given whole."""
    if tuple(value.shape) == tuple(shard_shape):
        return value
    if sharding is None:
        raise XlaError(f"{what}: shape {list(value.shape)}; the program takes {list(shard_shape)} on every device")
    tiles, ids = sharding
    if len(tiles) != len(shard_shape) or tuple(value.shape) != tuple(s * t for s, t in zip(shard_shape, tiles)):
        raise XlaError(f"{what}: shape {list(value.shape)}; each device takes {list(shard_shape)} of a value tiled "
                       f"{tiles} (the whole value {[s * t for s, t in zip(shard_shape, tiles)]}), or give that shape")
    where = np.argwhere(ids == partition)
    if not len(where):
        raise XlaError(f"{what}: its sharding places nothing on partition {partition}")
    index = tuple(slice(i * s, (i + 1) * s) for i, s in zip(where[0][:len(tiles)], shard_shape))
    return np.ascontiguousarray(value[index])


def run_partitioned_hlo(module, text: str, args, inputs, report: dict, output_shardings: list[str] | None = None) -> int:
    """Run XLA's partitioned per-device HLO ``module`` on its replicas x partitions for ``xla-run``. Inputs are
    whole values split by each parameter's ``sharding=`` (or values of the per-device shape, given to every
    device). With ``output_shardings`` (a StableHLO program's, :func:`partition_stablehlo`) each result is written
    whole (``result{i}``, its shards assembled); without (HLO text names none) each device's results are written
    (``result{i}`` when every device holds the same bits, else ``result{i}.device{d}``); under MPI rank 0 prints
    and writes."""
    import lowering

    from ..jax.sharded import mpi_runner, resolve_backend

    replicas, partitions = partition_grid(text)
    if args.check_xla or args.dump_intermediates or args.random_inputs or args.entry != "main":
        raise UnsupportedError("--check-xla, --dump-intermediates, --random-inputs and --entry are not supported for "
                               f"a partitioned program ({replicas} replicas x {partitions} partitions)")
    exe = lowering.compile(module, num_replicas=replicas, num_partitions=partitions)
    if args.timeout is not None:
        exe.timeout = args.timeout
    main = next(op for op in module.ops if getattr(op, "sym_name", None) is not None and op.sym_name.data == "main")
    params = list(main.function_type.inputs.data)
    inputs = [] if inputs is None else inputs
    if len(inputs) != len(params):
        raise XlaError(f"--inputs has {len(inputs)} arrays; the program takes {len(params)}")
    shardings = []
    for i, attrs in enumerate(main.arg_attrs.data if main.arg_attrs is not None else [None] * len(params)):
        kept = attrs.data.get("hlo.attributes") if attrs is not None else None
        text_of = kept.data.get("sharding") if kept is not None else None
        shardings.append(parse_sharding(text_of.data) if text_of is not None else None)
    n = replicas * partitions
    runner = mpi_runner(exe, text, args.timeout) if resolve_backend(args.backend) == "mpi" else None
    local = runner.local_devices if runner is not None else range(n)
    per_device = [None] * n
    for d in local:
        per_device[d] = [split_argument(np.asarray(x), tuple(t.get_shape()), s, d % partitions, f"--inputs arg{i}")
                         for i, (x, t, s) in enumerate(zip(inputs, params, shardings))]
    results = runner(*per_device) if runner is not None else exe(*per_device)
    if runner is not None and runner.rank != 0:
        return 0
    where = f"{n} devices on {runner.size} MPI ranks" if runner is not None else f"{n} devices (threads)"
    print(f"partitioned program: {replicas} replicas x {partitions} partitions, {where}")
    if args.memory:
        from lowering.executor.memory import program_memory

        from ..jax.sharded import format_bytes

        m = program_memory(module)
        print(f"each device: arguments {format_bytes(m.arguments)}, results {format_bytes(m.results)}, "
              f"peak of live values {format_bytes(m.peak)}")
    saved = {}
    report["results"] = []
    for i in range(len(results[0])):
        values = [np.asarray(r[i]) for r in results]
        if output_shardings:
            whole = assemble_result(values, output_shardings[i], partitions, f"result #{i}")
            saved[f"result{i}"] = whole
            print(f"result #{i}: {describe(whole)} (sharding {output_shardings[i]}: its devices' shards assembled)")
            print(np.array2string(whole, threshold=200))
            report["results"].append(result_summary(i, whole) | {"sharding": output_shardings[i]})
            continue
        same = all(v.dtype == values[0].dtype and v.shape == values[0].shape and v.tobytes() == values[0].tobytes()
                   for v in values)
        if same:
            saved[f"result{i}"] = values[0]
            print(f"result #{i}: {describe(values[0])} (the same on every device)")
            print(np.array2string(values[0], threshold=200))
        else:
            for d, v in enumerate(values):
                saved[f"result{i}.device{d}"] = v
            print(f"result #{i}: {describe(values[0])} per device (devices differ)")
            for d, v in enumerate(values):
                print(f"  device {d}: " + np.array2string(v, threshold=50, prefix="  device 0: "))
        report["results"].append(result_summary(i, values[0]) | {"same_on_every_device": same})
    if args.output:
        np.savez(args.output, **saved)
    report["status"] = "ok"
    report["devices"] = n
    sys.stdout.flush()
    return 0
