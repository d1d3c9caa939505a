"""Host-side runtime state of compiled programs: feeds, channels, custom-call targets.

Every :class:`~lowering.executor.executable.Executable` owns one :class:`Runtime`:

* ``exe.infeed`` - a :class:`FeedQueue` the caller fills (``exe.infeed.put(x)``)
  and ``hlo.infeed`` reads, in order;
* ``exe.outfeed`` - a :class:`FeedQueue` ``hlo.outfeed`` writes and the caller
  drains (``exe.outfeed.get()``);
* ``exe.channels`` - :class:`Channels`, one FIFO per channel id connecting
  ``hlo.send`` to ``hlo.recv`` (host transfers use the same queues, so the
  host reads what a program sends to it and provides what it receives).

The state persists across calls of the executable, like a device's feed
queues. Nothing ever blocks: reading an empty queue raises
:class:`~xla_dialect.errors.ExecutionError` at once (a program waiting for data
that never comes would hang in XLA; here it is reported); in a multi-device
run a receive waits a bounded time (:attr:`Channels.device_timeout`) for the
send of another device thread.

Custom-call targets are process-wide: :func:`register_custom_call` maps a
``call_target_name`` to a Python function called as
``fn(operands, attributes, result_types)``.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from xdsl.ir import Attribute

from xla_dialect.errors import ExecutionError, UnsupportedError


class Token:
    """The run-time value of an ``!hlo.token``: carries no data, only ordering."""

    _instance: Token | None = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "token"


TOKEN = Token()
"""The one token value (tokens carry no data)."""


class FeedQueue:
    """A host-side FIFO of items (an array, or a tuple of arrays) for infeed or outfeed."""

    def __init__(self, name: str):
        self.name = name
        self._items: deque = deque()

    def put(self, item) -> None:
        """Append ``item``: an array (anything ``np.asarray`` takes, lists too) or a tuple of them."""
        if isinstance(item, tuple):
            item = tuple(np.asarray(x) for x in item)
        else:
            item = np.asarray(item)
        self._items.append(item)

    def get(self):
        """Remove and return the oldest item; ExecutionError if the queue is empty."""
        try:
            return self._items.popleft()
        except IndexError:
            raise ExecutionError(f"the {self.name} queue is empty") from None

    def take(self, what: str):
        """:meth:`get` for a program op: the error names ``what`` (the op) and says how to feed it."""
        try:
            return self._items.popleft()
        except IndexError:
            raise ExecutionError(
                f"{what}: the {self.name} queue is empty (fill it with exe.{self.name}.put(...) before running)"
            ) from None

    def empty(self) -> bool:
        """True when there is nothing to read."""
        return not self._items

    def clear(self) -> None:
        """Drop every queued item."""
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"FeedQueue({self.name!r}, {len(self)} items)"


class Channels:
    """Channel id -> FIFO of sent items; ``hlo.send`` appends, ``hlo.recv`` takes.

    A receive never hangs: on one device it finds the item or fails at once
    (``timeout``, default 0). In a multi-device run, where devices are threads,
    it waits up to ``device_timeout`` seconds for another device's send, then
    raises ExecutionError naming the channel.
    """

    def __init__(self, timeout: float = 0.0, device_timeout: float = 10.0):
        self.timeout = timeout
        self.device_timeout = device_timeout
        self._queues: dict = {}
        self._cond = threading.Condition()

    def put(self, channel_id, item) -> None:
        """Send ``item`` on ``channel_id`` (from a program, or from the host)."""
        with self._cond:
            self._queues.setdefault(channel_id, deque()).append(item)
            self._cond.notify_all()

    def get(self, channel_id, what: str = "recv", timeout: float | None = None):
        """Take the oldest item sent on ``channel_id``; ExecutionError if none arrives within ``timeout``."""
        timeout = self.timeout if timeout is None else timeout
        with self._cond:
            queue = self._queues.setdefault(channel_id, deque())
            if not queue and timeout > 0:
                self._cond.wait_for(lambda: bool(queue), timeout)
            if not queue:
                waited = f" within {timeout:g} s" if timeout > 0 else ""
                raise ExecutionError(
                    f"{what}: nothing was sent on channel {channel_id}{waited} (a send on that channel must run first)"
                )
            return queue.popleft()

    def pending(self, channel_id) -> int:
        """How many items wait on ``channel_id``."""
        return len(self._queues.get(channel_id, ()))

    def clear(self) -> None:
        """Drop every pending item of every channel."""
        with self._cond:
            self._queues.clear()

    def __repr__(self) -> str:
        busy = {c: len(q) for c, q in self._queues.items() if q}
        return f"Channels({busy})"


class Runtime:
    """The host-side state of one executable: infeed, outfeed and channels."""

    def __init__(self):
        self.infeed = FeedQueue("infeed")
        self.outfeed = FeedQueue("outfeed")
        self.channels = Channels()


# ----------------------------------------------------------------------------
# Custom-call targets
# ----------------------------------------------------------------------------


class ResultSpec(NamedTuple):
    """What a custom-call target must return for one result."""

    shape: tuple[int, ...]  # () for tokens
    dtype: np.dtype | None  # None for a token result
    type: Attribute  # the xDSL result type (with its layout, if any)


CustomCallTarget = Callable[[Sequence[Any], Mapping[str, Any], Sequence[ResultSpec]], Any]

CUSTOM_CALL_TARGETS: dict[str, CustomCallTarget] = {}
"""``call_target_name`` -> Python implementation."""


def register_custom_call(target: str, fn: CustomCallTarget | None = None):
    """Register ``fn`` as the implementation of ``hlo.custom_call`` target ``target``.

    ``fn(operands, attributes, result_types)`` gets the operand arrays (tokens
    as :data:`TOKEN`), a dict of the op's attributes as Python values
    (``call_target_name``, ``backend_config`` - a string, or a dict for typed-FFI
    calls -, ``api_version``, ``has_side_effect``, ``called_functions`` - the
    compiled ``called_computations``, each taking and returning arrays -, ...) and one
    :class:`ResultSpec` per result; it returns one array, or a sequence with
    one array per result. Registering a target again replaces it. Usable as a
    decorator: ``@register_custom_call("my_target")``.
    """
    if not isinstance(target, str) or not target:
        raise ExecutionError(f"register_custom_call: target must be a non-empty string, got {target!r}")

    def deco(f: CustomCallTarget) -> CustomCallTarget:
        if not callable(f):
            raise ExecutionError(f"register_custom_call({target!r}): the implementation must be callable")
        CUSTOM_CALL_TARGETS[target] = f
        return f

    return deco(fn) if fn is not None else deco


def unregister_custom_call(target: str) -> None:
    """Remove a registered target (no error if it is not registered)."""
    CUSTOM_CALL_TARGETS.pop(target, None)


def custom_call_target(target: str, what: str = "hlo.custom_call") -> CustomCallTarget:
    """The implementation of ``target``; UnsupportedError naming it if there is none."""
    try:
        return CUSTOM_CALL_TARGETS[target]
    except KeyError:
        raise UnsupportedError(
            f"{what}: no implementation of custom-call target {target!r} is registered "
            f"(register one with lowering.register_custom_call({target!r}, fn))"
        ) from None
