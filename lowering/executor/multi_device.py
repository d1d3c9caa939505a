"""Multi-device execution: one program over a grid of replicas x partitions, in one process.

``lowering.compile(module, num_replicas=N, num_partitions=M)`` returns a
:class:`MultiDeviceExecutable` when ``N * M > 1``. Device ``d`` is
``(replica d // M, partition d % M)`` -- XLA's default device assignment and
StableHLO's flattened id. Calling the executable runs the same compiled code
once per device, each in its own Python thread (the NumPy kernels release the
GIL), and returns one result tuple per device::

    exe = lowering.compile(module, num_replicas=4)
    per_device = exe([x0], [x1], [x2], [x3])   # -> ((r0,), (r1,), (r2,), (r3,))

Where the devices' collectives meet, and how a device that never arrives is
detected: :mod:`lowering.runtime.devices`. The same devices can run in several
processes: :mod:`lowering.executor.mpi` runs each rank's devices through
:meth:`MultiDeviceExecutable.run_devices` with MPI messages in place of the
in-process rendezvous.
"""

from __future__ import annotations

import threading

from xla_dialect.errors import ExecutionError, XlaError

from ..runtime.devices import CollectiveMismatchError, DeviceState, ProcessGrid, ThreadedRun, set_current_device


# ----------------------------------------------------------------------------
# The executable
# ----------------------------------------------------------------------------


class MultiDeviceExecutable:
    """A program compiled for ``num_replicas`` x ``num_partitions`` devices.

    Call it with one argument list per device, in device order
    (``replica * num_partitions + partition``); it returns one result tuple
    per device. ``timeout`` (seconds, default None) bounds a single wait at a
    collective; mismatched collectives are detected without it.

    ``executable`` is the program every device runs (SPMD), or a list with each
    device's own program (MPMD: ``lowering.compile(module, entry=[["a"], ["b"]])``,
    lowered together so that they share one runtime: host transfers and
    send/recv channels connect them).
    """

    def __init__(self, executable, num_replicas: int, num_partitions: int, timeout: float | None = None):
        self.executables = list(executable) if isinstance(executable, (list, tuple)) \
            else [executable] * (num_replicas * num_partitions)
        if len(self.executables) != num_replicas * num_partitions:
            raise ExecutionError(f"{len(self.executables)} device programs for a grid of {num_replicas} replicas x "
                                 f"{num_partitions} partitions")
        self.executable = self.executables[0]
        self.grid = ProcessGrid(num_replicas, num_partitions)
        self.timeout = timeout

    @property
    def num_replicas(self) -> int:
        return self.grid.num_replicas

    @property
    def num_partitions(self) -> int:
        return self.grid.num_partitions

    @property
    def num_devices(self) -> int:
        return self.grid.num_devices

    @property
    def source(self) -> str:
        """The generated Python code (shared by every device)."""
        return self.executable.source

    @property
    def entry(self):
        return self.executable.entry

    @property
    def runtime(self):
        """The host-side runtime (:mod:`lowering.runtime.program_state`): one for all devices, so every device
        reads the same infeed and writes the same outfeed (XLA has a queue per device)."""
        return self.executable.runtime

    @property
    def infeed(self):
        return self.runtime.infeed

    @property
    def outfeed(self):
        return self.runtime.outfeed

    @property
    def channels(self):
        return self.runtime.channels

    def __call__(self, *per_device_args) -> tuple[tuple, ...]:
        per_device_args = self.check_arguments(per_device_args)
        run = ThreadedRun(self.grid, self.timeout)
        results, errors = self.run_devices(run, range(self.num_devices), per_device_args)
        if errors:
            raise self._error(errors)
        return tuple(results[d] for d in range(self.num_devices))

    def check_arguments(self, per_device_args: tuple) -> tuple:
        """``per_device_args`` checked to be one list or tuple per device (``()`` each for a program without
        parameters). None stands for a device this process does not run (another MPI rank's)."""
        n = self.num_devices
        name = ", ".join(dict.fromkeys(f"@{e.entry.sym_name.data}" for e in self.executables))
        if not per_device_args and not any(e.input_types for e in self.executables):
            per_device_args = ((),) * n
        if len(per_device_args) != n:
            raise ExecutionError(
                f"{name} runs on {n} devices ({self.num_replicas} replicas x {self.num_partitions} partitions): "
                f"give one argument list per device, got {len(per_device_args)}")
        for d, args in enumerate(per_device_args):
            if not isinstance(args, (list, tuple)) and args is not None:
                raise ExecutionError(f"{name}: the arguments of {self.grid.describe(d)} must be a list or tuple, "
                                     f"got {type(args).__name__}")
        return tuple(per_device_args)

    def run_devices(self, run, devices, per_device_args) -> tuple[dict, dict]:
        """Run ``devices`` (each in its own thread) against the rendezvous state ``run``; returns
        ``({device: results}, {device: exception})``.

        ``run`` is the in-process :class:`ThreadedRun` of a threaded call, or another transport with the same
        ``exchange`` and ``finish`` methods (:class:`lowering.executor.mpi.MpiRun`): the collective kernels and their
        ``combine`` functions are the same either way, only where the operands meet differs.
        """
        results: dict = {}
        errors: dict[int, BaseException] = {}

        def work(d: int) -> None:
            set_current_device(DeviceState(d, d // self.num_partitions, d % self.num_partitions, run))
            outcome = "finished"
            try:
                if per_device_args[d] is None:
                    raise ExecutionError(f"no arguments given for {self.grid.describe(d)}")
                results[d] = self.executables[d](*per_device_args[d])
            except BaseException as e:  # noqa: BLE001 - reported by the caller's thread
                errors[d] = e
                outcome = f"failed: {e}"
            finally:
                set_current_device(None)
                try:
                    run.finish(d, outcome, errors.get(d))
                except BaseException as e:  # noqa: BLE001 - e.g. MPI's last exchange timing out
                    errors.setdefault(d, e)

        threads = [threading.Thread(target=work, args=(d,), name=f"xla-device-{d}", daemon=True)
                   for d in devices]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results, errors

    def _error(self, errors: dict[int, BaseException]) -> BaseException:
        """The error to raise: the first device's own failure, before the mismatches it caused."""
        d = min(errors, key=lambda k: (isinstance(errors[k], CollectiveMismatchError), k))
        e = errors[d]
        if isinstance(e, XlaError):
            return type(e)(f"{self.grid.describe(d)}: {e}")
        return e
