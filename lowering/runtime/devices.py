"""The devices of a multi-device run: the process grid, each device thread's state, and the rendezvous where
collectives meet.

A program compiled for ``num_replicas`` x ``num_partitions`` devices
(:class:`lowering.executor.multi_device.MultiDeviceExecutable`) runs the same compiled
code once per device, each in its own Python thread. Device ``d`` is
``(replica d // M, partition d % M)`` -- XLA's default device assignment and
StableHLO's flattened id. The kernels read the device they run on from
thread-local state (:func:`current_device`).

A collective kernel meets the other members of its process group at a
:class:`_Slot` (one per op, process group and execution count, so a
collective inside a loop meets once per iteration): every member deposits its
operands; the last to arrive computes every member's result and wakes the
others.

A member that never arrives (a replica skipped the collective in a
conditional, ran a loop fewer times, or failed) is detected, never waited for:
the run counts the device threads still computing, and when none is -- all
are finished or waiting at collectives -- every incomplete rendezvous fails
with an :class:`ExecutionError` naming the op, the devices that arrived and
what the missing ones are doing. An optional ``timeout`` (seconds) bounds any
single wait as a last resort.

The same devices can run in several processes: :mod:`lowering.executor.mpi` replaces the
in-process rendezvous (:class:`ThreadedRun`) with MPI messages; the collective kernels
and their ``combine`` functions do not change.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xla_dialect.errors import ExecutionError, HloVerifyError

__all__ = ["CollectiveMismatchError", "ProcessGrid", "DeviceState", "ThreadedRun", "current_device", "exchange",
           "set_current_device"]


class CollectiveMismatchError(ExecutionError):
    """A collective's process group can never meet (a member skipped it, failed, or timed out)."""


# ----------------------------------------------------------------------------
# The process grid and its process groups (StableHLO "Collective ops" section)
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessGrid:
    """``num_replicas`` x ``num_partitions`` devices; device ``d`` is ``(d // M, d % M)``."""

    num_replicas: int
    num_partitions: int

    @property
    def num_devices(self) -> int:
        return self.num_replicas * self.num_partitions

    def device(self, replica: int, partition: int) -> int:
        """The flattened id of ``(replica, partition)``."""
        return replica * self.num_partitions + partition

    def describe(self, device: int) -> str:
        """``'device 3 (replica 1, partition 1)'`` for messages."""
        return f"device {device} (replica {device // self.num_partitions}, partition {device % self.num_partitions})"

    def process_groups(self, op_name: str, mode: str, groups: Sequence[Sequence[int]],
                       cover: bool = True) -> list[tuple[int, ...]]:
        """The process groups (tuples of device ids, in group order) of a collective.

        ``mode`` is one of StableHLO's strategies: ``cross_replica``,
        ``cross_partition``, ``cross_replica_and_partition`` or ``flattened_ids``;
        ``groups`` are the op's replica (or partition, or flattened id) groups,
        empty meaning one group of every id. With ``cover`` the groups must
        hold every id exactly once, as XLA's verifier requires for all-reduce,
        all-gather, all-to-all and reduce-scatter.
        """
        n, m = self.num_replicas, self.num_partitions
        size = {"cross_replica": n, "cross_partition": m, "cross_replica_and_partition": n,
                "flattened_ids": n * m}[mode]
        what = {"cross_replica": "replica", "cross_partition": "partition",
                "cross_replica_and_partition": "replica", "flattened_ids": "flattened device"}[mode]
        if not groups:
            if mode == "flattened_ids":
                raise HloVerifyError(f"{op_name}: use_global_device_ids needs explicit replica_groups "
                                     f"(flattened device ids), got none")
            groups = [list(range(size))]
        ids = [i for g in groups for i in g]
        for i in ids:
            if not 0 <= i < size:
                raise HloVerifyError(f"{op_name}: {what} id {i} in replica_groups {_text(groups)} is out of range "
                                     f"for {size} {what}s ({n} replicas x {m} partitions)")
        if cover and sorted(ids) != list(range(size)):
            missing = sorted(set(range(size)) - set(ids))
            raise HloVerifyError(f"{op_name}: replica_groups {_text(groups)} must hold every {what} id "
                                 f"0..{size - 1} once; missing {missing}")
        if mode == "cross_replica":
            return [tuple(self.device(r, p) for r in g) for g in groups for p in range(m)]
        if mode == "cross_partition":
            return [tuple(self.device(r, p) for p in g) for g in groups for r in range(n)]
        if mode == "cross_replica_and_partition":
            return [tuple(self.device(r, p) for p in range(m) for r in g) for g in groups]
        return [tuple(g) for g in groups]  # flattened ids are device ids


def _text(groups) -> str:
    return "[" + ", ".join("[" + ", ".join(str(i) for i in g) + "]" for g in groups) + "]"


# ----------------------------------------------------------------------------
# Per-thread device state and the rendezvous
# ----------------------------------------------------------------------------


@dataclass
class DeviceState:
    """What a device thread knows: where it is and how far it got."""

    device: int
    replica: int
    partition: int
    run: ThreadedRun
    # Collective key -> how many times this device executed it (rendezvous per execution).
    counts: dict = field(default_factory=dict)


_local = threading.local()


def current_device() -> DeviceState | None:
    """The state of the device the calling thread runs, or None outside a multi-device run."""
    return getattr(_local, "state", None)


def set_current_device(state: DeviceState | None) -> None:
    """Make ``state`` the device the calling thread runs (None: no device; the thread's run is over)."""
    _local.state = state


class _Slot:
    """One rendezvous: one execution of one collective by one process group."""

    __slots__ = ("what", "members", "deposits", "results", "error", "done", "taken")

    def __init__(self, what: str, members: tuple[int, ...]):
        self.what = what
        self.members = members
        self.deposits: dict[int, tuple] = {}
        self.results: list | None = None
        self.error: BaseException | None = None
        self.done = False
        self.taken = 0


class ThreadedRun:
    """The shared state of one call of a :class:`MultiDeviceExecutable`."""

    def __init__(self, grid: ProcessGrid, timeout: float | None):
        self.grid = grid
        self.timeout = timeout
        self.cond = threading.Condition()
        self.slots: dict[tuple, _Slot] = {}
        self.running = grid.num_devices  # threads neither finished nor waiting at a rendezvous
        self.waiting: dict[int, _Slot] = {}
        self.finished: dict[int, str] = {}  # device -> 'finished' | 'failed: ...'

    def exchange(self, state: DeviceState, key: tuple, members: tuple[int, ...], operands: tuple,
                 combine: Callable[[list[tuple]], list], what: str):
        """Deposit ``operands`` at rendezvous ``key``; return this device's entry of ``combine``'s result."""
        device = state.device
        with self.cond:
            slot = self.slots.get(key)
            if slot is None:
                slot = self.slots[key] = _Slot(what, members)
            slot.deposits[device] = operands
            last = len(slot.deposits) == len(members)
            if not last:
                self.running -= 1
                self.waiting[device] = slot
                self._detect_deadlock()
                # Whoever completes (or fails) the slot counts this device as running again
                # (_release), before waking it: no false deadlock while it wakes up.
                while not slot.done:
                    if not self.cond.wait(self.timeout) and not slot.done:
                        self._fail(slot, CollectiveMismatchError(
                            f"{what}: timed out after {self.timeout} s waiting for "
                            f"{self._missing_text(slot)}"))
        if last:
            # Compute outside the lock: other groups keep exchanging meanwhile.
            try:
                results = combine([slot.deposits[m] for m in members])
                error = None
            except BaseException as e:  # noqa: BLE001 - handed to every member
                results, error = None, e
            with self.cond:
                if not slot.done:
                    slot.results, slot.error, slot.done = results, error, True
                    self._release(slot)
        with self.cond:
            slot.taken += 1
            if slot.taken == len(members) or slot.error is not None:
                self.slots.pop(key, None)
            if slot.error is not None:
                raise slot.error
            return slot.results[members.index(device)]

    def finish(self, device: int, outcome: str, error: BaseException | None = None) -> None:
        """Record that ``device``'s thread returned (``outcome`` says how; ``error`` is its exception, used by
        other transports only)."""
        with self.cond:
            self.finished[device] = outcome
            self.running -= 1
            self._detect_deadlock()

    # -- failure detection (called with the lock held) ------------------------

    def _release(self, slot: _Slot) -> None:
        """Count the members waiting at a finished ``slot`` as running again, and wake them."""
        for d in slot.members:
            if self.waiting.get(d) is slot:
                del self.waiting[d]
                self.running += 1
        self.cond.notify_all()

    def _fail(self, slot: _Slot, error: CollectiveMismatchError) -> None:
        if not slot.done:
            slot.error, slot.done = error, True
            self._release(slot)

    def _detect_deadlock(self) -> None:
        """When no device is computing, no waiting device can ever be released: fail them."""
        if self.running > 0 or not self.waiting:
            return
        slots = list({id(s): s for s in self.waiting.values()}.values())
        # Describe every slot before failing any (failing one releases its waiters).
        errors = [CollectiveMismatchError(f"{slot.what}: collective mismatch, the process group "
                                          f"{list(slot.members)} can never meet: {self._missing_text(slot)}")
                  for slot in slots]
        for slot, error in zip(slots, errors):
            self._fail(slot, error)

    def _missing_text(self, slot: _Slot) -> str:
        parts = []
        for d in slot.members:
            if d in slot.deposits:
                continue
            where = self.finished.get(d)
            if where is None:
                other = self.waiting.get(d)
                where = f"waiting at {other.what}" if other is not None else "still running"
            parts.append(f"{self.grid.describe(d)} never arrived ({where})")
        arrived = sorted(slot.deposits)
        return "; ".join(parts) + f"; arrived: devices {arrived}"


_keys = itertools.count()


def new_collective_key() -> int:
    """A fresh identity for one lowered collective op (rendezvous are keyed by it)."""
    return next(_keys)


def exchange(op_key: int, group_key, members: tuple[int, ...], operands: tuple,
             combine: Callable[[list[tuple]], list], what: str):
    """Run one collective from the current device thread; return its results for this device.

    ``members`` are the device ids of this device's process group in group
    order; ``combine`` maps every member's operand tuple (in that order) to the
    list of every member's results. Called outside a multi-device run (no
    device state), a group must be this device alone.
    """
    state = current_device()
    if state is None:
        raise ExecutionError(f"{what}: a collective over {len(members)} devices needs a multi-device run "
                             f"(lowering.compile(..., num_replicas=..., num_partitions=...))")
    count_key = (op_key, group_key)
    count = state.counts.get(count_key, 0)
    state.counts[count_key] = count + 1
    return state.run.exchange(state, (op_key, group_key, count), members, operands, combine, what)
