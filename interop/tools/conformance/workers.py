"""Worker processes (:func:`run_programs`): programs run in forkserver (or spawned) workers with an
address-space limit and a per-program timeout; a worker that crashes, hangs or runs out of memory is replaced
and its program reported as an ``error``; workers end with the runner (:mod:`interop.processes`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from .records import Program, Result
from .running import run_program


def _limit_memory(megabytes: int | None) -> None:
    """Cap this process's address space (``RLIMIT_AS``) so a runaway program gets a MemoryError."""
    if not megabytes:
        return
    import resource

    limit = int(megabytes) << 20
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _worker_main(conn, memory_mb: int | None, runner: Callable[[Program], Result] | None = None,
                 lifeline=None) -> None:
    """A worker process: run the programs it is sent until told to stop (``None``) or the pipe closes.

    Ctrl-C reaches the whole process group: the worker ignores it, and the parent stops its workers. A parent
    killed without stopping them (SIGKILL, a closed terminal) ends them too, even inside a hanging program
    (:mod:`interop.processes`): Linux kills the worker when the forkserver (or, with ``spawn``, the parent)
    exits, which the forkserver does once the parent is gone and the worker has closed its copy of the
    server's "alive" pipe; and ``lifeline`` (the parent keeps its other end) reaching end of file ends it."""
    import signal

    from ...processes import die_with_parent, exit_when_closed, release_forkserver

    die_with_parent()
    release_forkserver()
    if lifeline is not None:
        exit_when_closed(lifeline)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_memory(memory_mb)
    run = runner or run_program
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        index, program = task
        conn.send(index)  # taken: the program's timeout starts now, not while the worker was starting up
        conn.send((index, run(program)))


def _context():
    """``forkserver`` (each worker forks from a server that has imported the heavy modules once), else ``spawn``.

    ``fork`` is avoided: the parent may hold threads (JAX/XLA thread pools)
    whose locks a forked child would inherit.
    """
    import multiprocessing as mp

    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        # Importing, not initializing: JAX starts no threads until a backend is used.
        # The executor and the parser's helpers too: each fresh worker (one per crash or timeout) would
        # otherwise import them with its first program, charged to that program's timeout.
        ctx.set_forkserver_preload(["interop.tools.conformance", "jax", "xdsl", "xla_dialect", "lowering",
                                    "lowering.kernels", "lowering.executor.executable", "passes.pipelines",
                                    "interop.stablehlo"])
        return ctx
    return mp.get_context("spawn")


_STARTUP_SECONDS = 300.0
"""How long a worker may take to acknowledge a program (a fresh worker imports JAX first, slowly on a busy
machine); the program's own timeout starts with the acknowledgement."""


class _Worker:
    """One worker process and the task it is running."""

    def __init__(self, ctx, memory_mb: int | None, runner, lifeline=None):
        import multiprocessing as mp

        self.conn, child = mp.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, memory_mb, runner, lifeline), daemon=True)
        self.process.start()
        child.close()
        self.task: int | None = None
        self.deadline = 0.0
        self.started = 0.0
        self.acknowledged = False
        self.timeout: float | None = None

    def send(self, index: int, program: Program, timeout: float | None) -> None:
        self.task = index
        self.started = time.monotonic()
        self.acknowledged = False
        self.timeout = timeout
        self.deadline = self.started + _STARTUP_SECONDS
        self.conn.send((index, program))

    def receive(self):
        """The task's result if the worker sent it, else ``None``; an acknowledgement starts the timeout.
        ``EOFError`` / ``OSError`` when the worker died."""
        while self.conn.poll():
            message = self.conn.recv()
            if isinstance(message, int):
                self.acknowledged = True
                self.started = time.monotonic()
                self.deadline = self.started + self.timeout if self.timeout else float("inf")
                continue
            return message[1]
        return None

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                self.process.kill()
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def _death_message(process) -> str:
    import signal

    code = process.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker crashed ({name})"
    return f"worker exited with code {code}"


def run_programs(programs: Sequence[Program], jobs: int = 1, timeout: float | None = 120.0,
                 memory_mb: int | None = 4096, progress: Callable[[Result], None] | None = None,
                 runner: Callable[[Program], Result] | None = None) -> list[Result]:
    """Run ``programs`` in ``jobs`` worker processes; results in the order of ``programs``.

    Each program gets ``timeout`` seconds and ``memory_mb`` MiB of address
    space; a worker that crashes, hangs or runs out of memory is replaced and
    its program reported as an ``error``. ``jobs=0`` runs everything in this
    process (no isolation; for debugging). ``runner`` replaces
    :func:`run_program` (it must be a picklable module-level function).
    ``progress`` is called with each result as it arrives.

    Ctrl-C (``KeyboardInterrupt``) stops the workers and raises :class:`Interrupted` holding the results
    of the programs that finished.
    """
    results: list[Result | None] = [None] * len(programs)
    try:
        return _run_programs(programs, results, jobs, timeout, memory_mb, progress, runner)
    except KeyboardInterrupt:
        raise Interrupted([r for r in results if r is not None]) from None


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_programs`; ``results`` are those of the programs that finished, in order."""

    def __init__(self, results: list[Result]):
        super().__init__(f"interrupted after {len(results)} programs")
        self.results = results


def _run_programs(programs, results, jobs, timeout, memory_mb, progress, runner) -> list[Result]:
    """The body of :func:`run_programs`, filling ``results`` as programs finish."""
    run = runner or run_program
    pending: list[int] = []
    for i, p in enumerate(programs):
        if p.mode in ("run", "roundtrip"):
            pending.append(i)
        else:
            results[i] = run_program(p)
            if progress:
                progress(results[i])
    if jobs <= 0:
        for i in pending:
            results[i] = run(programs[i])
            if progress:
                progress(results[i])
        return results  # type: ignore[return-value]
    from multiprocessing.connection import wait

    ctx = _context()
    pending.reverse()  # pop() from the end: program order
    workers: list[_Worker] = []
    lifeline, held = ctx.Pipe(duplex=False)  # the workers' end reaches end of file when this process is gone
    try:
        while pending or any(w.task is not None for w in workers):
            while len(workers) < min(jobs, len(pending) + sum(w.task is not None for w in workers)):
                workers.append(_Worker(ctx, memory_mb, runner, lifeline))
            for w in workers:
                if w.task is None and pending:
                    i = pending.pop()
                    w.send(i, programs[i], timeout)
            busy = [w for w in workers if w.task is not None]
            now = time.monotonic()
            wait_for = max(0.0, min(w.deadline for w in busy) - now) if busy else 0.0
            ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy],
                             timeout=min(wait_for, 1.0)))
            now = time.monotonic()
            for w in busy:
                outcome: Result | None = None
                replace = False
                program = programs[w.task]
                died = False
                if w.conn in ready:
                    try:
                        outcome = w.receive()
                    except (EOFError, OSError):
                        died = True
                    now = time.monotonic()
                if outcome is None and (died or w.process.sentinel in ready):
                    w.process.join(1)
                    outcome = Result(program.path, program.name, "error", _death_message(w.process),
                                     round(now - w.started, 4), program.family)
                    replace = True
                elif outcome is None and now >= w.deadline:
                    message = (f"timeout after {timeout:g} s" if w.acknowledged
                               else f"the worker did not start within {_STARTUP_SECONDS:g} s")
                    outcome = Result(program.path, program.name, "error", message, round(now - w.started, 4),
                                     program.family)
                    replace = True
                if outcome is None:
                    continue
                results[w.task] = outcome
                w.task = None
                if progress:
                    progress(outcome)
                if replace:
                    w.stop(kill=True)
                    workers.remove(w)
    finally:
        for w in workers:
            w.stop(kill=w.task is not None)
        lifeline.close()
        held.close()
    return results  # type: ignore[return-value]
