"""Untrusted MLIR bytecode is read in a child process first: :func:`check_in_subprocess`.

jaxlib's C++ bytecode reader aborts the process or loops on some corrupted input that is well framed
(:mod:`interop.stablehlo.bytecode` checks the framing). :func:`check_in_subprocess` imports the bytes in a
child process exactly as the caller is about to (jaxlib's reader, then the importer), bounded in CPU and
wall-clock time, so that this process reads only bytes that a child read safely.
"""

from __future__ import annotations

from xla_dialect.errors import MlirParseError

from .importer import import_mlir_module
from .parse import parse_mlir


READ_CPU_SECONDS = 2.0
READ_CPU_SECONDS_PER_BYTE = 20e-6
"""jaxlib's reader may use this much CPU time on the bytes before the check declares it stuck: it spins on some
corrupted input (found by mutating a 741-byte artifact; it also grew to gigabytes). Real bytecode reads at
about 0.8 us a byte of op-dense code (206 KB, 12k ops: 0.16 s), 25 times less than this."""

CPU_SECONDS = 10.0
CPU_SECONDS_PER_BYTE = 100e-6
"""The whole child (reading, then the importer) may use this much CPU time: the import takes about 8 us a byte
of op-dense code (206 KB: 1.6 s), 12 times less."""

WALL_SECONDS = 60.0
WALL_SECONDS_PER_BYTE = 300e-6
"""The default wall-clock limit (a child that waits rather than spins; under load the child gets less CPU)."""


def _child_main(data: bytes, read_done=lambda: None) -> str:
    """What the checking child does: import ``data`` as the caller is about to; a clean error's text.
    ``read_done()`` is called once jaxlib's reader has the module."""
    try:
        module = parse_mlir(data)
        read_done()
        import_mlir_module(module, allow_unknown=True)
    except Exception as e:  # a clean error: the caller will raise it too, with its example arguments
        return type(e).__name__ + ": " + str(e)[-2000:]
    return ""


_CHILD = """
import sys
from interop.stablehlo.bytecode_check import _child_main
sys.stdout.write(_child_main(sys.stdin.buffer.read()))
sys.exit(0)
"""


def check_in_subprocess(data: bytes, timeout: float | None = None) -> None:
    """Import ``data`` in a child process first, exactly as this process is about to (the same code on the
    same bytes): if jaxlib crashes there (it aborts on some malformed bytecode, also while the importer
    reads the module's strings) or it does not finish, raise :class:`MlirParseError` here, so that this
    process never reads such input. A clean error in the child lets this process go on (it will meet the
    same error, or none with its example arguments).

    Not finishing is bounded by the input's size: jaxlib's reader may use :data:`READ_CPU_SECONDS` plus
    :data:`READ_CPU_SECONDS_PER_BYTE` of CPU time (2 s for 1 KB), the whole child :data:`CPU_SECONDS` plus
    :data:`CPU_SECONDS_PER_BYTE`, and ``timeout`` seconds of wall-clock time (default :data:`WALL_SECONDS`
    plus :data:`WALL_SECONDS_PER_BYTE`); CPU time, not wall-clock time, so that a loaded machine does not
    turn a slow real program into a corrupt one.

    On Linux the child is a fork of this process, which has (or is about to import) the importer and jax:
    it starts in milliseconds with every module loaded, where a fresh interpreter spent 2-5 s importing jax
    and the importer. Elsewhere (no ``fork``, or it fails) the child is a new interpreter, with the
    wall-clock limit only."""
    import sys

    if timeout is None:
        timeout = WALL_SECONDS + WALL_SECONDS_PER_BYTE * len(data)
    if sys.platform.startswith("linux"):
        status = _forked_check(data, timeout)
        if status is not _NO_FORK:
            return _verdict(status)
    status = _spawned_check(data, timeout)
    _verdict(f"reading it did not finish in {timeout:g} s (corrupted input?)" if status is None else status)


_NO_FORK = object()


def _verdict(status: int | str) -> None:
    """``status``: the child's exit status (negative: the signal that ended it), or why it was stopped."""
    if isinstance(status, str):
        raise MlirParseError(f"MLIR bytecode: {status}")
    if status == 0:
        return
    reason = f"signal {-status}" if status < 0 else f"exit status {status}"
    raise MlirParseError(f"MLIR bytecode: jaxlib crashed reading this input ({reason}); it is corrupted or not a "
                         "StableHLO artifact jaxlib can read")


def _spawned_check(data: bytes, timeout: float) -> int | None:
    import os
    import subprocess
    import sys

    from ..processes import CHILD_GUARD

    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    child = subprocess.Popen([sys.executable, "-c", CHILD_GUARD + _CHILD, str(os.getpid())], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        child.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    finally:
        _end(child.pid, child.poll() is None)
        child.wait()
    return child.returncode


def _end(pid: int, running: bool) -> None:
    """Kill the checking child unless it has ended (Ctrl-C, a timeout: it must not outlive the check)."""
    import os
    import signal

    if running:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _forked_check(data: bytes, timeout: float) -> int | str | object:
    """Run :func:`_child_main` in a fork of this process; its exit status, why it was stopped (past a CPU
    budget or ``timeout``, see :func:`check_in_subprocess`), or :data:`_NO_FORK` if this process cannot fork."""
    import faulthandler
    import os
    import signal
    import time
    import warnings

    from ..processes import die_with_parent
    from .context import mlir_context

    context = mlir_context()  # created here, before the fork: the caller needs it next anyway
    parent = os.getpid()
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # jax warns on every fork once its backends run: this child runs none
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        try:
            pid = os.fork()
        except OSError:  # (e.g. no memory for the page tables): a new interpreter instead
            os.close(read_end)
            os.close(write_end)
            return _NO_FORK
    if pid == 0:  # the child: never returns into the caller's code
        code = 0
        try:
            die_with_parent(parent)  # killed when the thread that forked it (waiting for it) dies, e.g. of SIGKILL
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C in a terminal ends it with the caller
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.close(read_end)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            faulthandler.disable()  # (its file is the caller's stderr, under another descriptor)
            # The context's thread pool is the parent's: its threads do not exist here.
            context.enable_multithreading(False)
            _child_main(data, lambda: os.write(write_end, b"r"))
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(write_end)
    os.set_blocking(read_end, False)
    size = len(data)
    read_budget = READ_CPU_SECONDS + READ_CPU_SECONDS_PER_BYTE * size
    budget = CPU_SECONDS + CPU_SECONDS_PER_BYTE * size
    deadline = time.monotonic() + timeout
    delay = 0.001
    read = False
    running = True
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                running = False
                return os.waitstatus_to_exitcode(status)
            if not read:
                try:
                    read = bool(os.read(read_end, 1))
                except BlockingIOError:
                    pass
            used = _cpu_seconds(pid)
            if not read and used > read_budget:
                return (f"jaxlib's reader spun for {used:.1f} s of CPU time on these {size} bytes without "
                        f"finishing (its limit for this size: {read_budget:.1f} s; real bytecode reads in about "
                        "1 s a megabyte): corrupted input")
            if used > budget:
                return (f"importing it used {used:.1f} s of CPU time on these {size} bytes without finishing "
                        f"(limit {budget:.1f} s for this size): corrupted input?")
            if time.monotonic() >= deadline:
                return f"reading it did not finish in {timeout:g} s (corrupted input?)"
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    finally:  # stopped, or Ctrl-C / an exception in this thread: the child goes too
        os.close(read_end)
        if running:
            _end(pid, True)
            os.waitpid(pid, 0)


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process ``pid`` has used so far (Linux's /proc); 0 if it cannot be read."""
    import os

    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
