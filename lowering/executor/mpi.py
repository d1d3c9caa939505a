"""Multi-device execution across processes: the devices of one program on the ranks of an MPI job.

``MpiDeviceExecutable(exe)`` wraps a :class:`lowering.executor.multi_device.MultiDeviceExecutable` (``N`` devices) for
the ranks of ``MPI.COMM_WORLD`` (or another communicator): rank ``r`` of ``P`` runs the devices
:func:`devices_of_rank` gives it (a contiguous block; one device per rank when ``P == N``), each in its own
thread, as the threaded run does. Every rank calls the executable with the same arguments (SPMD, as
under ``mpiexec -n P python script.py``); every rank gets every device's results.

Collective semantics are not reimplemented: the kernels of :mod:`lowering.kernels.collectives` hand the
same ``combine`` function (reduce in group order, concatenate, permute, ...) to the transport. In a
threaded run the last member to arrive applies it to every member's operands; here each member sends its
operands to every other member of its group, receives theirs, and applies ``combine`` itself to the
operands in group order. So each reduction is computed in the same fixed order as in the threaded run
(never by MPI's own reductions, whose order is the library's), and the results are bitwise equal.

Failures never hang the job. Every message carries the collective it belongs to (op, process group,
execution count): a device that receives another collective's operands (a rank that diverged) fails with
an error naming both ops and both ranks. A device that finishes or fails tells every other device; one
still waiting for it fails, naming the op, the device and its rank. Every call ends with each device
hearing from every other (the final word: finished, or the error), so all ranks raise the same error
(the first device's own failure, as the threaded run). A peer that is never heard from (a crashed
process) fails the wait after ``timeout`` seconds. Waits poll with short sleeps instead of blocking in
MPI, whose blocking calls spin a CPU (ranks outnumbering cores would slow each other down).

Send/recv channels and the infeed/outfeed queues live in one process and do not cross ranks.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence

from xla_dialect.errors import ExecutionError, UnsupportedError, XlaError

from ..runtime.devices import CollectiveMismatchError, DeviceState, ProcessGrid
from .multi_device import MultiDeviceExecutable

__all__ = ["MpiDeviceExecutable", "MpiRun", "abort", "devices_of_rank", "gather_all", "mpi_world_size"]

DEFAULT_TIMEOUT = 600.0
"""Seconds a device waits to hear from another before failing (only a crashed peer is detected this way)."""

def mpi_world_size() -> int:
    """The number of processes of the MPI job this process was started in (by ``mpiexec``), read from the
    launcher's environment without initialising MPI; 1 outside ``mpiexec``."""
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        value = os.environ.get(name)
        if value and value.isdigit():
            return int(value)
    return 1


def _mpi():
    """mpi4py's MPI module (initialising MPI with thread support), or an UnsupportedError saying how to get it."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise UnsupportedError(f"running devices over MPI needs mpi4py and an MPI library: pip install "
                               f"'xla-dialect[mpi]' (mpich and mpi4py from PyPI) ({e})") from None
    return MPI


def devices_of_rank(rank: int, num_ranks: int, num_devices: int) -> list[int]:
    """The devices rank ``rank`` of ``num_ranks`` runs: a contiguous block, the first ranks taking one more
    when ``num_devices`` is not a multiple (4 devices on 2 ranks: [0, 1] and [2, 3])."""
    if num_ranks > num_devices:
        raise ExecutionError(f"{num_ranks} MPI ranks for a program of {num_devices} devices: run at most one rank "
                             f"per device (mpiexec -n {num_devices} or fewer)")
    base, extra = divmod(num_devices, num_ranks)
    start = rank * base + min(rank, extra)
    return list(range(start, start + base + (1 if rank < extra else 0)))


class _Poller:
    """Waits by polling: a few quick tries, then sleeps growing to 2 ms (MPI's blocking waits spin a core)."""

    def __init__(self, timeout: float | None):
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.tries = 0

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def pause(self) -> None:
        self.tries += 1
        if self.tries > 20:
            time.sleep(min(2e-3, 1e-5 * 1.5 ** min(self.tries - 20, 30)))


def gather_all(comm, value, what: str, timeout: float | None = DEFAULT_TIMEOUT, tag: int = 0) -> list:
    """Every rank's ``value``, in rank order, on every rank (an allgather by point-to-point messages, waited for
    by polling). A rank not heard from within ``timeout`` seconds fails it with an error naming the ranks."""
    rank, size = comm.Get_rank(), comm.Get_size()
    requests = [comm.isend(value, dest=r, tag=tag) for r in range(size) if r != rank]
    values: list = [None] * size
    values[rank] = value
    pending = [r for r in range(size) if r != rank]
    poller = _Poller(timeout)
    while pending:
        for r in list(pending):
            message = comm.improbe(source=r, tag=tag)
            if message is not None:
                values[r] = message.recv()
                pending.remove(r)
        if pending:
            if poller.expired():
                raise ExecutionError(f"{what}: rank {rank} heard nothing from ranks {pending} within {timeout} s "
                                     "(did they fail before this point, or do they run another program?)")
            poller.pause()
    _complete(requests, poller, what)
    return values


def _complete(requests: list, poller: _Poller, what: str) -> None:
    """Wait (polling) until the sends of ``requests`` are delivered."""
    while requests:
        requests[:] = [r for r in requests if not r.Test()]
        if requests:
            if poller.expired():
                raise ExecutionError(f"{what}: {len(requests)} messages not delivered in time")
            poller.pause()


def _error_info(error: BaseException, rank: int) -> dict:
    """What other ranks learn of a device's failure (the exception itself may not pickle)."""
    cls = type(error) if isinstance(error, XlaError) else None
    text = str(error) if cls is not None else f"{type(error).__name__}: {error}"
    return {"class": cls, "message": text, "rank": rank,
            "secondary": isinstance(error, CollectiveMismatchError) and getattr(error, "secondary", False)}


class _PeerError(CollectiveMismatchError):
    """A device failed because another device did (not its own failure)."""

    secondary = True


class MpiRun:
    """The rendezvous of one call over MPI: the :class:`lowering.runtime.devices.ThreadedRun` interface (``exchange``,
    ``finish``) on point-to-point messages. Device ``s`` sends to device ``t`` with tag ``s * N + t``; MPI
    keeps the messages of one (sender, tag) in order, so each pair of devices sees its collectives in
    program order."""

    def __init__(self, grid: ProcessGrid, comm, rank_of: Sequence[int], timeout: float | None):
        self.grid = grid
        self.comm = comm
        self.rank = comm.Get_rank()
        self.rank_of = list(rank_of)
        self.timeout = timeout
        self.lock = threading.Lock()
        self.outcomes: dict[int, dict | None] = {}  # device -> None (finished) or its error info
        self.sends: dict[int, list] = {}  # device -> its requests not yet known delivered
        self.ended: dict[int, set] = {}  # device -> the devices whose final word it has received

    def _tag(self, source: int, target: int) -> int:
        return source * self.grid.num_devices + target

    def _where(self, device: int) -> str:
        return f"{self.grid.describe(device)} on rank {self.rank_of[device]}"

    def _send(self, source: int, target: int, message) -> None:
        request = self.comm.isend(message, dest=self.rank_of[target], tag=self._tag(source, target))
        pending = self.sends.setdefault(source, [])
        pending.append(request)
        if len(pending) > 64:  # drop the delivered ones now and then
            pending[:] = [r for r in pending if not r.Test()]

    def _receive(self, source: int, target: int, poller: _Poller):
        """The next message from device ``source`` to device ``target``, or None when ``poller`` expires."""
        tag, rank = self._tag(source, target), self.rank_of[source]
        while True:
            message = self.comm.improbe(source=rank, tag=tag)
            if message is not None:
                return message.recv()
            if poller.expired():
                return None
            poller.pause()

    def exchange(self, state: DeviceState, key: tuple, members: tuple[int, ...], operands: tuple, combine,
                 what: str):
        """Send ``operands`` to the other members, receive theirs, apply ``combine`` to all in group order and
        return this device's entry (as :meth:`lowering.runtime.devices.ThreadedRun.exchange`)."""
        me = state.device
        header = (what, key[1], key[2])  # op, process group, execution count: the same on every rank
        for m in members:
            if m != me:
                self._send(me, m, ("data", header, operands))
        deposits = []
        for m in members:
            if m == me:
                deposits.append(operands)
                continue
            message = self._receive(m, me, _Poller(self.timeout))
            execution = f"execution {key[2] + 1} of {what} (process group {list(members)})"
            if message is None:
                raise CollectiveMismatchError(f"{what}: {self._where(me)} heard nothing from {self._where(m)} "
                                              f"within {self.timeout} s at {execution}")
            kind = message[0]
            if kind == "data":
                if message[1] != header:
                    other, group, count = message[1]
                    raise CollectiveMismatchError(
                        f"{what}: collective mismatch: {self._where(me)} is at {execution}; {self._where(m)} sent "
                        f"its operands of execution {count + 1} of {other} (process group index {group}): the ranks "
                        "run different programs or took different paths")
                deposits.append(message[2])
                continue
            info = message[1]  # the final word of device m: it will not take part
            with self.lock:
                self.outcomes[m] = info
            self._heard_end(me, m)
            if info is None:
                raise CollectiveMismatchError(f"{what}: collective mismatch: {self._where(m)} finished its program "
                                              f"without {execution}, which {self._where(me)} is at")
            raise _PeerError(f"{what}: {self._where(me)} was waiting at {execution} for {self._where(m)}, which "
                             f"failed: {info['message']}")
        return combine(deposits)[members.index(me)]

    def _heard_end(self, me: int, source: int) -> None:
        with self.lock:
            self.ended.setdefault(me, set()).add(source)

    def finish(self, device: int, outcome: str, error: BaseException | None = None) -> None:
        """Tell every other device how ``device`` ended, then hear every other device's final word (draining
        operands sent to a collective this device never reached: their senders fail on this device's word)."""
        info = None if error is None else _error_info(error, self.rank)
        with self.lock:
            self.outcomes[device] = info
        for t in range(self.grid.num_devices):
            if t != device:
                self._send(device, t, ("end", info))
        poller = _Poller(self.timeout)
        heard = self.ended.get(device, set())
        for s in range(self.grid.num_devices):
            if s == device or s in heard:
                continue
            while True:
                message = self._receive(s, device, poller)
                if message is None:
                    with self.lock:
                        self.outcomes.setdefault(s, {
                            "class": CollectiveMismatchError, "rank": self.rank_of[s], "secondary": False,
                            "message": f"not heard from within {self.timeout} s (its process crashed or hangs)"})
                    break
                if message[0] == "end":
                    with self.lock:
                        self.outcomes[s] = message[1]
                    break
        _complete(self.sends.pop(device, []), _Poller(self.timeout), "the end of the run")


class MpiDeviceExecutable:
    """A :class:`~lowering.executor.multi_device.MultiDeviceExecutable` whose devices run on the ranks of an MPI job.

    Call it on every rank with one argument list per device (entries of devices other ranks run may be
    None: :attr:`local_devices` are the ones used here); it returns every device's results on every rank
    (``gather=False``: only this rank's devices', None elsewhere). ``comm`` defaults to ``MPI.COMM_WORLD``;
    ``timeout`` (seconds) bounds each wait for another device (a crashed process), default 600.

    An error of a call is raised on every rank alike (its ``all_ranks`` attribute is True): the job can end
    normally. An error a rank meets on its own elsewhere (a missing file) leaves the others waiting at their
    next exchange until ``timeout``: end the job with :func:`abort` instead.
    """

    def __init__(self, executable: MultiDeviceExecutable, comm=None, timeout: float | None = DEFAULT_TIMEOUT):
        if not isinstance(executable, MultiDeviceExecutable):
            raise ExecutionError(f"MpiDeviceExecutable wraps a multi-device executable (lowering.compile(..., "
                                 f"num_partitions=N)), got {type(executable).__name__}")
        MPI = _mpi()
        self.executable = executable
        self.grid = executable.grid
        world = MPI.COMM_WORLD if comm is None else comm
        self.timeout = timeout
        # Own communicators: the collectives' messages never meet the caller's, nor the setup's.
        self.comm = _duplicate(world, timeout)
        self.control = _duplicate(world, timeout)
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        n = self.grid.num_devices
        if n * n > MPI.TAG_UB:
            raise UnsupportedError(f"{n} devices need message tags up to {n * n}; this MPI allows {MPI.TAG_UB}")
        self.rank_of = [r for r in range(self.size) for _ in devices_of_rank(r, self.size, n)]
        self.local_devices = devices_of_rank(self.rank, self.size, n)
        # Devices run in threads: one thread calls MPI at a time with one device per rank, several at once
        # with more.
        needed = MPI.THREAD_MULTIPLE if len(self.local_devices) > 1 else MPI.THREAD_SERIALIZED
        if MPI.Query_thread() < needed:
            raise UnsupportedError(f"rank {self.rank} runs devices {self.local_devices} in threads, but this MPI "
                                   "library was initialised without thread support (mpi4py.rc.thread_level = "
                                   "'multiple' is mpi4py's default); run one rank per device or enable it")
        _check_channels(executable)

    @property
    def num_devices(self) -> int:
        return self.grid.num_devices

    def agree(self, value, what: str) -> list:
        """Every rank's ``value`` (rank order) on every rank; raises on every rank if any rank's value is an
        exception (a rank that failed before a call: the others would otherwise wait for it)."""
        values = gather_all(self.control, value, what, self.timeout)
        failed = [(r, v) for r, v in enumerate(values) if isinstance(v, BaseException)]
        if failed:
            r, e = failed[0]
            cls = type(e) if isinstance(e, XlaError) else ExecutionError
            error = cls(f"rank {r}: {e}" + (f" (and ranks {[f for f, _ in failed[1:]]})" if len(failed) > 1 else ""))
            error.all_ranks = True  # every rank raises it: no rank is left waiting (see interop.tools.cli)
            raise error
        return values

    def __call__(self, *per_device_args, gather: bool = True) -> tuple:
        """Run this rank's devices; every device's result tuple, in device order (see the class)."""
        try:
            per_device_args = self.executable.check_arguments(per_device_args)
            missing = [d for d in self.local_devices if per_device_args[d] is None]
            if missing:
                raise ExecutionError(f"rank {self.rank}: no arguments for its devices {missing}")
            ready: object = True
        except Exception as e:  # noqa: BLE001 - handed to every rank, so that none waits for this one
            ready = e
        self.agree(ready, "the start of the run")
        run = MpiRun(self.grid, self.comm, self.rank_of, self.timeout)
        results, errors = self.executable.run_devices(run, self.local_devices, per_device_args)
        error = self._error(run, errors)
        if error is not None:
            raise error
        if not gather:
            return tuple(results.get(d) for d in range(self.num_devices))
        everything: dict = {}
        for part in gather_all(self.control, results, "gathering the results", self.timeout):
            everything.update(part)
        return tuple(everything[d] for d in range(self.num_devices))

    def _error(self, run: MpiRun, errors: dict) -> BaseException | None:
        """The error every rank raises: the first device's own failure (before the failures it caused), named
        with its rank, and what the other devices were doing."""
        outcomes = {d: info for d, info in run.outcomes.items() if info is not None}
        for d, e in errors.items():  # this rank's own exceptions, with their tracebacks
            outcomes[d] = _error_info(e, self.rank)
        if not outcomes:
            return None
        first = min(outcomes, key=lambda d: (outcomes[d]["secondary"], d))
        info = outcomes[first]
        where = f"{self.grid.describe(first)} on rank {info['rank']}"
        others = sorted(d for d in outcomes if d != first)
        # Messages of collective failures name their devices and ranks already.
        text = info["message"] if f"on rank {info['rank']}" in info["message"] else f"{where}: {info['message']}"
        if others:
            text += (f" [also failed: devices {others} on ranks "
                     f"{sorted({outcomes[d]['rank'] for d in others})}]")
        cls = info["class"] if info["class"] is not None else ExecutionError
        try:
            error = cls(text)
        except Exception:  # noqa: BLE001 - a class whose constructor takes other arguments
            error = ExecutionError(text)
        if first in errors:
            error.__cause__ = errors[first]
        error.all_ranks = True  # every rank raises it (see interop.tools.cli)
        return error


def _duplicate(comm, timeout: float | None):
    """``comm.Dup()``, waited for by polling (a rank that never comes, having failed before, is an error after
    ``timeout`` seconds rather than a hang spinning a CPU)."""
    duplicate, request = comm.Idup()
    poller = _Poller(timeout)
    while not request.Test():
        if poller.expired():
            raise ExecutionError(f"rank {comm.Get_rank()}: not every rank created the MPI executable within {timeout} s "
                                 "(did one fail before it?)")
        poller.pause()
    return duplicate


def abort(code: int = 1) -> None:
    """End every rank of the job now (``MPI_Abort``): for a rank that fails on its own, outside a call."""
    _mpi().COMM_WORLD.Abort(code)


def _check_channels(executable: MultiDeviceExecutable) -> None:
    """Send/recv between devices go through in-process queues: refuse them across ranks."""
    try:
        module = executable.entry
        while module.parent_op() is not None:
            module = module.parent_op()
    except AttributeError:
        return
    from xla_dialect.ops.effects import RecvOp, SendOp, is_host_transfer

    for op in module.walk():
        if isinstance(op, (SendOp, RecvOp)) and not is_host_transfer(op):
            raise UnsupportedError(f"{op.name}: send/recv channels between devices do not cross MPI ranks "
                                   "(they are in-process queues); run the program threaded")
