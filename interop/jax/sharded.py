"""Sharded JAX programs, partitioned as XLA partitions them, run one program per device.

:func:`compile_sharded` takes a sharded JAX program (``jax.jit`` with ``in_shardings`` /
``out_shardings`` over a mesh, ``with_sharding_constraint`` inside, ``jax.shard_map``), has jaxlib
compile it for the host devices and reads XLA's partitioned per-device HLO (``compile().as_text()``:
the SPMD partitioner's program, with its collectives) through :func:`interop.import_hlo`. No
partitioning is done here: every device runs XLA's own per-device program on the multi-device
executor (:class:`lowering.executor.multi_device.MultiDeviceExecutable`, one thread per device), and the
:class:`ShardedExecutable` is called like the jitted function: global arrays in (split into each
device's shard by the input shardings), global arrays out (assembled from the shards by the output
shardings; a replicated output is checked to be the same bits on every device holding it).

Device ``d`` of the executor is XLA's logical device ``d`` (replica ``d // num_partitions``,
partition ``d % num_partitions``), the jax device ``compiled.runtime_executable().local_devices()[d]``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lowering.executor.memory import ProgramMemory
from xla_dialect.errors import ExecutionError, UnsupportedError, XlaError

__all__ = ["DeviceMemory", "MemoryReport", "ShardedExecutable", "StaticArguments", "compile_sharded"]


def compile_sharded(fn, *example_args, in_shardings=None, out_shardings=None, mesh=None, trusted: bool = False,
                    backend: str = "threads", timeout: float | None = None, **example_kwargs) -> ShardedExecutable:
    """Compile a sharded JAX program for the NumPy executor, partitioned as XLA partitions it.

    ``fn`` is a ``jax.jit`` function (its shardings kept; ``jax.jit(jax.shard_map(...))`` too), a plain
    function (jitted here with ``in_shardings`` / ``out_shardings`` when given), a ``jax.stages.Traced``,
    ``Lowered`` or ``Compiled``, or a sharded ``jax.export.Exported`` (or its ``serialize()`` bytes).
    Functions and exports are traced with the example arguments (arrays or ``jax.ShapeDtypeStruct``);
    jaxlib compiles the program for as many host devices as its shardings use
    (``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before jax starts gives the CPU N devices).

    An export runs on its first ``nr_devices`` host devices, over ``mesh`` if given, else a mesh of the
    export's own axis names and sizes (``Exported.in_shardings_jax``). Serialized bytes are read by jaxlib
    only after a check in a child process, unless ``trusted=True`` (as :func:`interop.import_jax`).

    Returns a :class:`ShardedExecutable`: ``exe(*args)`` gives what ``fn(*args)`` gives (NumPy arrays, the
    same pytree), ``exe.per_device(*args)`` each device's shards.

    ``backend`` says where the devices run: ``"threads"`` (the default: one thread per device in this
    process), ``"mpi"`` (over the ranks of the MPI job this process is one of, ``mpiexec -n P python ...``:
    every rank compiles and calls the executable alike, runs its block of devices and gets the global
    results; see :mod:`lowering.executor.mpi`), or ``"auto"`` (``"mpi"`` when started by ``mpiexec`` with more than one
    process, else ``"threads"``). The results are the same bits either way. ``timeout`` (seconds) bounds a
    device's wait for another at a collective (MPI default 600 s: a crashed rank; the threaded run detects
    mismatches without it).
    """
    import jax

    if isinstance(fn, (bytes, bytearray, memoryview)):
        fn = _deserialize(bytes(fn), trusted)
    if isinstance(fn, jax.export.Exported):
        if in_shardings is not None or out_shardings is not None:
            raise XlaError("compile_sharded: an export has its shardings already; in_shardings / out_shardings "
                           "are for a function to jit")
        fn = _jit_of_exported(fn, mesh)
    elif mesh is not None:
        raise XlaError("compile_sharded: mesh= is for an export; a function's shardings name their mesh")
    backend = resolve_backend(backend)
    compiled, statics, callbacks = _compiled(fn, example_args, example_kwargs, in_shardings, out_shardings)
    return ShardedExecutable(compiled, statics=statics, host_callbacks=callbacks, backend=backend, timeout=timeout)


BACKENDS = ("threads", "mpi", "auto")


def resolve_backend(backend: str) -> str:
    """``"threads"`` or ``"mpi"`` for a ``backend`` option (``"auto"``: MPI when this process is one of several
    started by ``mpiexec``)."""
    if backend not in BACKENDS:
        raise XlaError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        from lowering.executor.mpi import mpi_world_size

        return "mpi" if mpi_world_size() > 1 else "threads"
    return backend


def _deserialize(data: bytes, trusted: bool):
    import jax

    try:
        exported = jax.export.deserialize(bytearray(data))
    except ImportError as e:
        raise UnsupportedError(f"reading serialized jax.export bytes needs the 'flatbuffers' package: {e}") from None
    except Exception as e:  # noqa: BLE001 - jax's reader's own message
        raise XlaError(f"compile_sharded: the bytes are not a serialized jax.export.Exported: {e}") from None
    if not trusted:
        from ..stablehlo.bytecode_check import check_in_subprocess

        check_in_subprocess(bytes(exported.mlir_module_serialized))
    return exported


def _jit_of_exported(exported, mesh):
    """``jax.jit`` of the export's call, with its shardings placed on the first ``nr_devices`` host devices."""
    import jax
    from jax.sharding import Mesh

    count = exported.nr_devices
    devices = jax.devices()
    if len(devices) < count:
        raise UnsupportedError(f"compile_sharded: the export runs on {count} devices, this process has "
                               f"{len(devices)}: set XLA_FLAGS=--xla_force_host_platform_device_count={count} "
                               "before jax starts")
    if mesh is None:
        named = [s for s in (*getattr(exported, "_in_named_shardings", ()),
                             *getattr(exported, "_out_named_shardings", ())) if s is not None]
        if getattr(exported, "_has_named_shardings", False) and named:
            abstract = named[0].mesh
            mesh = Mesh(np.array(devices[:count]).reshape(abstract.axis_sizes), abstract.axis_names,
                        axis_types=abstract.axis_types)
        else:
            mesh = Mesh(np.array(devices[:count]), ("_exported",))
    try:
        ins, outs = exported.in_shardings_jax(mesh), exported.out_shardings_jax(mesh)
    except ValueError as e:
        raise XlaError(f"compile_sharded: the export's shardings do not fit mesh {mesh}: {e}") from None
    # An argument the export leaves unspecified (all of a shard_map's) is given whole to every device: the
    # program then runs on the mesh's devices (jax refuses a 1-device context for an export of N).
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    ins = [replicated if s is None else s for s in ins]
    arg_shardings, kwarg_shardings = jax.tree.unflatten(exported.in_tree, ins)
    if kwarg_shardings:
        raise UnsupportedError("compile_sharded: an export with keyword arguments; expected positional ones only")
    return jax.jit(exported.call, in_shardings=tuple(arg_shardings),
                   out_shardings=jax.tree.unflatten(exported.out_tree, list(outs)))


def _compiled(fn, args, kwargs, in_shardings, out_shardings):
    import jax

    if in_shardings is not None or out_shardings is not None:
        if not callable(fn) or isinstance(fn, (jax.stages.Lowered, jax.stages.Compiled, jax.stages.Traced)):
            raise XlaError("compile_sharded: in_shardings / out_shardings are for a function to jit; this "
                           f"{type(fn).__name__} has its shardings already")
        if hasattr(fn, "lower") and type(fn).__module__.split(".")[0] in ("jax", "jaxlib"):
            raise XlaError("compile_sharded: the function is jitted already: give the shardings to jax.jit "
                           "(jax.jit(f, in_shardings=..., out_shardings=...)), or pass the plain function")
        options = {}
        if in_shardings is not None:
            options["in_shardings"] = in_shardings
        if out_shardings is not None:
            options["out_shardings"] = out_shardings
        fn = jax.jit(fn, **options)
    if isinstance(fn, jax.stages.Compiled):
        if args or kwargs:
            raise XlaError("compile_sharded: a jax.stages.Compiled has its shapes already; no example arguments")
        return fn, None, ()
    if isinstance(fn, (jax.stages.Lowered, jax.stages.Traced)):
        if args or kwargs:
            raise XlaError(f"compile_sharded: a {type(fn).__name__} has its shapes already; no example arguments")
        lowered = _jax_compiles(lambda: fn if isinstance(fn, jax.stages.Lowered) else fn.lower(), fn)
        return _jax_compiles(lowered.compile, fn), None, _host_callbacks(lowered)
    if not callable(fn):
        raise XlaError(f"compile_sharded: cannot compile a {type(fn).__name__}; expected a jax.jit function, a "
                       "function with in_shardings/out_shardings, or a jax.stages.Traced, Lowered or Compiled")
    from .importer import jit_of_call

    jitted = jit_of_call(fn)
    statics = StaticArguments(jitted, args, kwargs)
    lowered = _jax_compiles(lambda: jitted.lower(*args, **kwargs), fn)
    return _jax_compiles(lowered.compile, fn), statics, _host_callbacks(lowered)


def _host_callbacks(lowered) -> tuple:
    """The Python functions of the program's host callbacks (``jax.debug.print``, ...), by index."""
    try:
        return tuple(lowered._lowering.compile_args.get("host_callbacks") or ())
    except AttributeError:
        return ()


class StaticArguments:
    """The static arguments of a jitted function (``static_argnums`` / ``static_argnames``) and the values it was
    compiled for: a call gives them again, as to the jitted function, and they must be the same."""

    def __init__(self, jitted, args, kwargs):
        import inspect

        info = getattr(jitted, "_jit_info", None)
        self.nums = {i + len(args) if i < 0 else i for i in (getattr(info, "static_argnums", ()) or ())}
        self.names = set(getattr(info, "static_argnames", ()) or ())
        self.name_of: dict[int, str] = {}  # static positions that may be given by name: one key either way
        signature = getattr(info, "fun_signature", None)
        if signature is not None:  # a static position may be given by its name, and a static name by position
            params = list(signature.parameters.values())
            positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            self.names |= {params[i].name for i in self.nums if i < len(params)
                           and params[i].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD}
            self.nums |= {i for i, p in enumerate(params) if p.name in self.names and p.kind in positional}
            self.name_of = {i: params[i].name for i in self.nums
                            if i < len(params) and params[i].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD}
        self.values = self.split(args, kwargs)[2]

    def split(self, args, kwargs):
        """``(dynamic args, dynamic kwargs, {position or name: static value})``."""
        statics = {self.name_of.get(i, i): a for i, a in enumerate(args) if i in self.nums}
        statics.update({k: v for k, v in kwargs.items() if k in self.names})
        return ([a for i, a in enumerate(args) if i not in self.nums],
                {k: v for k, v in kwargs.items() if k not in self.names}, statics)

    def dynamic(self, args, kwargs):
        """The dynamic arguments of a call, after checking its static ones are those compiled for."""
        args, kwargs, statics = self.split(args, kwargs)
        if statics != self.values:
            raise ExecutionError(f"static arguments {_statics_text(statics)} given; the program was compiled for "
                                 f"{_statics_text(self.values)} (compile again for other static values)")
        return tuple(args), kwargs


def _statics_text(statics: dict) -> str:
    return "{" + ", ".join(f"{'argument ' + str(k) if isinstance(k, int) else k}={v!r}"
                           for k, v in statics.items()) + "}"


def _jax_compiles(compile_it, fn):
    """``compile_it()``; jax's refusal (a sharding that does not divide a dimension, a tracing error, ...) as an
    XlaError with jax's message (its exception is the cause)."""
    try:
        return compile_it()
    except XlaError:
        raise
    except Exception as e:  # noqa: BLE001 - jax's own message, kept whole
        name = getattr(fn, "__name__", type(fn).__name__)
        raise XlaError(f"compile_sharded: jax could not compile {name!r} for the host devices: "
                       f"{type(e).__name__}: {e}") from e


def _partitioned_text(compiled) -> str:
    """XLA's per-device program as HLO text, its large constants printed (``compile().as_text()`` elides them)."""
    try:
        (module,) = compiled.runtime_executable().hlo_modules()
        return _printed_module(module)
    except (AttributeError, ImportError, ValueError):  # another jaxlib: its own text, checked when imported
        return compiled.as_text()


def _printed_module(module) -> str:
    """An HLO module of jaxlib as text with its large constants printed."""
    from jax._src.lib import xla_client

    try:
        options = xla_client.hlo.HloPrintOptions()
        options.print_large_constants = True
        return module.to_string(options)
    except (AttributeError, ImportError):  # another jaxlib: its default text, checked when imported
        return module.to_string()


_HEADER_INT = r"\b{}=(\d+)"


def _header_count(text: str, key: str) -> int:
    header = text.split("\n", 1)[0]
    m = re.search(_HEADER_INT.format(key), header) if header.startswith("HloModule") else None
    return int(m.group(1)) if m else 1


class ShardedExecutable:
    """XLA's partitioned program of a sharded JAX function, run on the NumPy executor, one thread per device.

    ``exe(*args, **kwargs)``: global arrays in and out, as the jitted function. ``exe.per_device(...)``:
    each device's output shards, in device order (``exe.devices``). ``exe.shard_inputs(...)``: each
    device's argument shards. ``exe.hlo_text`` is XLA's per-device program, ``exe.module`` its import,
    ``exe.executable`` the multi-device executable (``num_replicas`` x ``num_partitions`` devices).
    """

    def __init__(self, compiled, statics: StaticArguments | None = None, host_callbacks=(), backend: str = "threads",
                 timeout: float | None = None, **compile_options):
        import jax

        import lowering

        from ..hlo import import_hlo
        from .importer import _capture_host_callbacks

        self.compiled = compiled
        self.statics = statics
        self.hlo_text = _partitioned_text(compiled)
        self.num_replicas = _header_count(self.hlo_text, "replica_count")
        self.num_partitions = _header_count(self.hlo_text, "num_partitions")
        try:
            self.devices = list(compiled.runtime_executable().local_devices())
        except AttributeError:  # older jax
            self.devices = list(compiled._executable.xla_executable.local_devices())
        if len(self.devices) != self.num_devices:
            raise UnsupportedError(f"compile_sharded: XLA's program runs on {self.num_replicas} replicas x "
                                   f"{self.num_partitions} partitions, but on {len(self.devices)} addressable devices "
                                   "(a multi-process program); expected every device in this process")
        platforms = {d.platform for d in self.devices}
        if platforms != {"cpu"}:
            raise UnsupportedError(f"compile_sharded: the program was compiled for {sorted(platforms)} devices; the "
                                   "executor reproduces XLA CPU's partitioned program: run jax on the CPU "
                                   "(JAX_PLATFORMS=cpu, XLA_FLAGS=--xla_force_host_platform_device_count=N)")
        self.in_tree = compiled.in_tree
        self.out_tree = compiled.out_tree
        self.in_avals = jax.tree.leaves(compiled.in_avals)
        self.in_shardings = jax.tree.leaves(compiled.input_shardings, is_leaf=lambda x: x is None)
        self.out_avals = jax.tree.leaves(compiled.out_info)
        self.out_shardings = [o.sharding for o in self.out_avals]
        kept = getattr(getattr(compiled, "_executable", None), "_kept_var_idx", None)
        self.kept = sorted(kept) if kept is not None else list(range(len(self.in_avals)))
        if len(self.in_shardings) != len(self.in_avals):
            raise UnsupportedError(f"compile_sharded: {len(self.in_shardings)} input shardings for "
                                   f"{len(self.in_avals)} arguments")
        self.module = import_hlo(self.hlo_text)
        _capture_host_callbacks(self.module, host_callbacks)  # each device calls them, as jax.jit's devices do
        self.executable = lowering.compile(self.module, num_replicas=self.num_replicas,
                                           num_partitions=self.num_partitions, **compile_options)
        self.backend = resolve_backend(backend)
        if timeout is not None and self.num_devices > 1:
            self.executable.timeout = timeout
        self.runner = None  # the MPI runner (lowering.executor.mpi.MpiDeviceExecutable) of backend "mpi"
        if self.backend == "mpi":
            self.runner = mpi_runner(self.executable, self.hlo_text, timeout)
        main = next(op for op in self.module.ops if getattr(op, "sym_name", None) is not None
                    and op.sym_name.data == "main")
        n_params = len(main.function_type.inputs.data)
        if n_params != len(self.kept):
            raise UnsupportedError(f"compile_sharded: XLA's per-device program takes {n_params} parameters, the "
                                   f"function {len(self.kept)} used arguments; expected one parameter per used "
                                   "argument (tupled or token parameters are not supported)")
        self._in_index = [self._index_maps(s, a.shape, f"argument {i}")
                          for i, (s, a) in enumerate(zip(self.in_shardings, self.in_avals)) if i in set(self.kept)]
        self._out_index = [self._index_maps(s, a.shape, f"output {i}")
                           for i, (s, a) in enumerate(zip(self.out_shardings, self.out_avals))]

    @property
    def num_devices(self) -> int:
        return self.num_replicas * self.num_partitions

    def _index_maps(self, sharding, shape, what: str) -> list[tuple]:
        """Each device's index (a tuple of slices) into the global value of ``shape``."""
        if sharding is None:
            return [tuple(slice(None) for _ in shape)] * self.num_devices
        try:
            by_device = sharding.devices_indices_map(tuple(shape))
        except Exception as e:  # noqa: BLE001 - jax's own message
            raise UnsupportedError(f"compile_sharded: {what}: cannot place sharding {sharding} on the devices: "
                                   f"{e}") from None
        missing = [d for d in self.devices if d not in by_device]
        if missing:
            raise UnsupportedError(f"compile_sharded: {what}: sharding {sharding} does not place a shard on "
                                   f"devices {missing}; expected every device of the program")
        return [tuple(by_device[d]) for d in self.devices]

    # -- inputs -----------------------------------------------------------------

    def _flat_args(self, args, kwargs) -> list[np.ndarray]:
        import jax

        if self.statics is not None:
            args, kwargs = self.statics.dynamic(args, kwargs)
        leaves, tree = jax.tree.flatten((args, kwargs))
        if tree != self.in_tree:
            raise ExecutionError(f"the sharded program takes arguments of structure {self.in_tree}, got {tree}")
        out = []
        for i, (x, aval) in enumerate(zip(leaves, self.in_avals)):
            dtype = np.dtype(aval.dtype)
            arr = np.asarray(x)
            if tuple(arr.shape) != tuple(aval.shape):
                raise ExecutionError(f"argument {i}: expected shape {tuple(aval.shape)}, got {tuple(arr.shape)}")
            if arr.dtype != dtype:
                if jax.dtypes.canonicalize_dtype(arr.dtype) != dtype:
                    raise ExecutionError(f"argument {i}: expected {dtype}, got {arr.dtype}")
                arr = arr.astype(dtype)  # as jax.jit does with float64 when x64 is off
            out.append(arr)
        return out

    def shard_inputs(self, *args, devices=None, **kwargs) -> list[list[np.ndarray] | None]:
        """Each device's arguments (the used ones, in parameter order): its shard of every global argument
        (with ``devices``, only those devices' shards, None for the others)."""
        flat = self._flat_args(args, kwargs)
        used = [flat[i] for i in self.kept]
        wanted = range(self.num_devices) if devices is None else set(devices)
        return [[np.array(x[index[d]], copy=True, order="C") for x, index in zip(used, self._in_index)]
                if d in wanted else None for d in range(self.num_devices)]

    # -- running ----------------------------------------------------------------

    def per_device(self, *args, **kwargs) -> tuple[tuple[np.ndarray, ...], ...]:
        """Run the program; each device's flat outputs (its shards), in device order (under MPI: every
        device's, gathered on every rank)."""
        if self.runner is not None:
            shards = self.shard_inputs(*args, devices=self.runner.local_devices, **kwargs)
            results = tuple(tuple(r) for r in self.runner(*shards))
        else:
            results = self._run_threads(self.shard_inputs(*args, **kwargs))
        for d, r in enumerate(results):
            if len(r) != len(self.out_avals):
                raise ExecutionError(f"device {d} returned {len(r)} values; the function returns "
                                     f"{len(self.out_avals)}")
        return results

    def _run_threads(self, shards):
        if self.num_devices == 1:
            results = (tuple(self.executable(*shards[0])),)
        else:
            results = tuple(tuple(r) for r in self.executable(*shards))
        return results

    def assemble(self, per_device: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
        """The global outputs (flat) from each device's shards; devices holding the same shard must agree."""
        outputs = []
        for i, (aval, index) in enumerate(zip(self.out_avals, self._out_index)):
            dtype = np.dtype(aval.dtype)
            value = np.empty(tuple(aval.shape), dtype)
            seen: dict = {}
            for d, where in enumerate(index):
                shard = np.asarray(per_device[d][i])
                key = tuple((s.start, s.stop, s.step) for s in where)
                target = value[where]
                if shard.shape != target.shape:
                    raise ExecutionError(f"output {i}: device {d} returned a shard of shape {shard.shape}, its "
                                         f"sharding {self.out_shardings[i]} places {target.shape} there")
                if key in seen:
                    first = seen[key]
                    if not _same_bits(shard, value[where]):
                        raise ExecutionError(f"output {i}: devices {first} and {d} hold the same shard (index "
                                             f"{_index_text(where)}) with different values")
                    continue
                seen[key] = d
                value[where] = shard
            outputs.append(value)
        return outputs

    def __call__(self, *args, **kwargs):
        import jax

        return jax.tree.unflatten(self.out_tree, self.assemble(self.per_device(*args, **kwargs)))

    def memory_report(self) -> MemoryReport:
        """Each device's memory: the bytes of its arguments (its shards), its results and the peak of the values
        its program holds at once on this executor (:func:`lowering.executor.memory.program_memory`: arguments,
        intermediates and results, in program order), with the rank running it under MPI; and XLA's own
        figures for its compiled per-device program (``compiled.memory_analysis()``) where jaxlib gives them."""
        from lowering.executor.memory import program_memory

        memory = program_memory(self.module)
        xla = None
        try:
            analysis = self.compiled.memory_analysis()
            xla = {"arguments": int(analysis.argument_size_in_bytes), "results": int(analysis.output_size_in_bytes),
                   "temporaries": int(analysis.temp_size_in_bytes)}
        except Exception:  # noqa: BLE001 - an older jaxlib or another backend: the executor's figures only
            pass
        rank_of = self.runner.rank_of if self.runner is not None else [None] * self.num_devices
        # SPMD: every device runs the same program on shards of the same shapes.
        rows = [DeviceMemory(memory.arguments, memory.results, memory.peak, device=d, rank=rank_of[d])
                for d in range(self.num_devices)]
        return MemoryReport(rows, xla)

    def __repr__(self) -> str:
        return (f"ShardedExecutable({self.module_name!r}: {self.num_replicas} replicas x {self.num_partitions} "
                f"partitions)")

    @property
    def module_name(self) -> str:
        header = self.hlo_text.split("\n", 1)[0]
        m = re.match(r"HloModule\s+([^\s,]+)", header)
        return m.group(1) if m else "?"


@dataclass(frozen=True)
class DeviceMemory(ProgramMemory):
    """One device's bytes (:class:`lowering.executor.memory.ProgramMemory`: ``arguments`` are its shards): ``device``, and
    ``rank``, the MPI rank running it (None in a threaded run)."""

    device: int = 0
    rank: int | None = None


@dataclass(frozen=True)
class MemoryReport:
    """:meth:`ShardedExecutable.memory_report`: a :class:`DeviceMemory` per device, and XLA's per-device figures
    (``{"arguments", "results", "temporaries"}`` in bytes, or None)."""

    devices: list
    xla: dict | None

    def text(self) -> str:
        """One line per device, then XLA's figures."""
        lines = [f"device {m.device}: arguments {format_bytes(m.arguments)}, results {format_bytes(m.results)}, "
                 f"peak of live values {format_bytes(m.peak)} (intermediates {format_bytes(m.intermediates)})"
                 + ("" if m.rank is None else f", rank {m.rank}")
                 for m in self.devices]
        if self.xla is not None:
            lines.append("XLA's compiled per-device program: arguments "
                         f"{format_bytes(self.xla['arguments'])}, results {format_bytes(self.xla['results'])}, "
                         f"temporaries {format_bytes(self.xla['temporaries'])}")
        return "\n".join(lines)


def format_bytes(n: int) -> str:
    """``1.5 KiB``-style sizes for reports."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def mpi_runner(executable, program_text: str, timeout: float | None):
    """The MPI runner of a multi-device ``executable`` (:class:`lowering.executor.mpi.MpiDeviceExecutable`), after
    checking that every rank compiled the same program (``program_text``: XLA's per-device HLO; ranks with
    other jax versions or flags would otherwise diverge at run time)."""
    import hashlib

    from lowering.executor.multi_device import MultiDeviceExecutable
    from lowering.executor.mpi import DEFAULT_TIMEOUT, MpiDeviceExecutable

    if not isinstance(executable, MultiDeviceExecutable):
        raise UnsupportedError("backend 'mpi': the program runs on one device; nothing to spread over ranks")
    runner = MpiDeviceExecutable(executable, timeout=DEFAULT_TIMEOUT if timeout is None else timeout)
    digests = runner.agree(hashlib.sha256(program_text.encode()).hexdigest(), "comparing the ranks' programs")
    differ = [r for r, h in enumerate(digests) if h != digests[0]]
    if differ:
        raise ExecutionError(f"backend 'mpi': ranks {differ} compiled another per-device program than rank 0 (other "
                             "jax/jaxlib versions, XLA_FLAGS or inputs?); every rank must run the same program")
    return runner


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.itemsize == 0 or a.size == 0:
        return True
    return bytes(np.ascontiguousarray(a).tobytes()) == bytes(np.ascontiguousarray(b).tobytes())


def _index_text(where) -> str:
    return "[" + ", ".join(f"{s.start or 0}:{'' if s.stop is None else s.stop}" for s in where) + "]"
