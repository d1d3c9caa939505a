"""Corrupted MLIR bytecode / portable artifacts give project errors, never a crash of the caller's process."""

import numpy as np
import pytest

from interop import import_jax, import_stablehlo
from interop.stablehlo.bytecode import check_bytecode
from xla_dialect.errors import MlirParseError, XlaError


def _artifact() -> bytes:
    import jax
    import jax.numpy as jnp

    x = np.ones((4, 4), np.float32)
    return bytes(jax.export.export(jax.jit(lambda v: jnp.sin(v) @ v.T))(x).mlir_module_serialized)


def test_valid_artifact_passes_the_checks():
    data = _artifact()
    check_bytecode(data)
    untrusted, trusted = import_jax(data), import_stablehlo(data, trusted=True)
    assert str(untrusted) == str(trusted)


def test_producer_that_is_not_utf8():
    # jaxlib aborts the whole process (SIGABRT) on this one.
    data = bytearray(_artifact())
    data[data.index(b"StableHLO") + 2] = 0xFF
    with pytest.raises(MlirParseError, match="producer string is not UTF-8"):
        import_jax(bytes(data))


@pytest.mark.parametrize("cut", [5, 40, -7])
def test_truncated_bytecode(cut):
    data = _artifact()
    with pytest.raises(XlaError):
        import_jax(data[:cut])


def _mutations(count: int, seed: int):
    data = _artifact()
    rng = np.random.default_rng(seed)
    for _ in range(count):
        b = bytearray(data)
        for _ in range(rng.integers(1, 4)):
            b[rng.integers(0, len(b))] = rng.integers(0, 256)
        yield bytes(b)


def _import_or_project_error(data: bytes) -> None:
    try:
        import_jax(data)
    except XlaError:
        pass


def test_random_corruptions_few():
    for data in _mutations(6, seed=1):  # seed 1 holds a mutation on which jaxlib's string conversion aborts
        _import_or_project_error(data)


@pytest.mark.slow
def test_random_corruptions_many():
    for data in _mutations(200, seed=2):
        _import_or_project_error(data)


def test_trusted_switch_of_import_jax_xla_run_and_xla_opt(tmp_path, monkeypatch, capsys):
    """import_jax(bytes, trusted=True), xla-run --trusted and xla-opt --trusted skip the child-process check
    of bytes you produced yourself (as import_stablehlo(data, trusted=True)); by default it runs."""
    import jax
    import jax.numpy as jnp

    import interop.stablehlo.bytecode_check
    from interop.tools.cli import xla_run_main
    from interop.tools.xla_opt import main as xla_opt_main

    checked = []
    real = interop.stablehlo.bytecode_check.check_in_subprocess
    monkeypatch.setattr(interop.stablehlo.bytecode_check, "check_in_subprocess", lambda data: checked.append(len(data)) or
                        real(data))
    x = np.ones(3, np.float32)
    exported = jax.export.export(jax.jit(lambda v: jnp.sin(v) * 2))(x)
    for data in (exported.serialize(), exported.mlir_module_serialized):  # serialized export, artifact
        checked.clear()
        trusted = import_jax(data, trusted=True)
        assert checked == []
        assert str(import_jax(data)) == str(trusted) and len(checked) == 1
    path = tmp_path / "prog.bin"
    path.write_bytes(exported.serialize())
    np.savez(tmp_path / "in.npz", arg0=x)
    checked.clear()
    assert xla_run_main([str(path), "--inputs", str(tmp_path / "in.npz"), "--trusted"]) == 0
    assert xla_opt_main([str(path), "--trusted"]) == 0 and checked == []
    assert xla_run_main([str(path), "--inputs", str(tmp_path / "in.npz")]) == 0 and len(checked) == 1
    capsys.readouterr()

    def f(v, trusted):  # tracing reads no bytes: a keyword of that name is the function's own
        return v * trusted

    assert "hlo.multiply" in str(import_jax(f, x, trusted=2.0))


def test_the_child_process_check_is_cheap():
    """The check of untrusted bytes took 3-5 s a call (a new interpreter importing jax and the importer);
    the child is now a fork of this process, with everything loaded."""
    import time

    from interop.stablehlo.bytecode_check import check_in_subprocess

    data = _artifact()
    check_in_subprocess(data)  # (this process loads what the importer needs once)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        check_in_subprocess(data)
        times.append(time.perf_counter() - start)
    assert min(times) < 1.0, times


_SPINNING_XLA_RUN = """
import sys
import interop.stablehlo.bytecode_check

def spin(data, *rest):  # a child stuck in jaxlib's reader at 100% CPU
    while True:
        pass

interop.stablehlo.bytecode_check._child_main = spin
from interop.tools.cli import xla_run_main
sys.exit(xla_run_main([sys.argv[1]]))
"""


def _children(pid: int) -> list[int]:
    import glob

    found = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path) as f:
                found += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # (a zombie has ended)
    except OSError:
        return False


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="/proc and fork")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGKILL"])
@pytest.mark.sample(2)
def test_the_checking_child_ends_with_xla_run(tmp_path, how):
    """Killing xla-run (a caller's timeout, Ctrl-C) while it checks untrusted bytes left the checking child
    running (one spun at 100% CPU for over an hour)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "prog.mlirbc"
    path.write_bytes(_artifact())
    run = subprocess.Popen([sys.executable, "-c", _SPINNING_XLA_RUN, str(path)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    children = []
    try:
        deadline = time.monotonic() + 60
        while not children and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
            children = _children(run.pid)
        assert children, "xla-run started no checking child"
        time.sleep(0.3)
        run.send_signal(getattr(signal, how))
        run.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(c) for c in children), f"the checking child outlived xla-run ({how})"
    finally:
        run.kill()
        for c in children:
            try:
                os.kill(c, signal.SIGKILL)
            except OSError:
                pass


# A 741-byte artifact (the 4x4 sin/matmul export, three bytes changed) on which jaxlib's reader spins at 100% CPU
# (another such one grew to 2.7 GB in 8 s), zlib-compressed.
_SPINNING_ARTIFACT = (
    "eNpVkWtr2zAUhqWennmeMEaYEIIRJoTQmZBk2QilLMswpdmlLd1WxhhjGCdRFxff5ku2fdinfu4P2a/bX5icXtZato70vK+k1/bx"
    "0d8PxmkZzCP5+ujEX48Go/HgCaECKRoUGDDTatoOXMoG9ZipMbPDTMbUo5ppM3tTrjvobrhaohysyU6G1pAiM4E3NUvdmrX1FpCL"
    "7o6DFgcEzTC5bunY4JRgE1toixaiEMJBp9EGoXX6VDMWP7BdV/tS9PrYaQyVMKrB7wsx3sVuY0+B5xvnhXgJuNPhjkWbFOCNQTsM"
    "4MSA41Phip7oi6FLKf2yQx2zTcn9y9H5DQI8OFDTG4XqdGvLRc4N4QJqdXTUXdC1fReotv0d6XtkauADRXin3mv7EHQLWJPgzFZe"
    "ZZq5Wl312TMdUCG2/QK0B8pPySMcqc/WFuOR1cVW192zeMOxOTcZn1dhVIYJWa+ilMTpsookOauShfpRpAgT6a+fkjIPkiJLC1nD"
    "ZVr632Qi8yCqtVyWVZ7UwqQol2EyJZMoiOfLYErOg5+DqpCFX6yCTPpZGv2K0zxbhUVMYnXcIKliPwvyMizDNCn+s1xmUbgICnIe"
    "lr5/tR1Z17PH6fXm7lCFI5OrwNONNLmVbvMq/ucOvxP9/opN1FwWVVT6YXKWkqsxiQN1SFbNVRrycJdhj7JXh8cfP8Fn+NryvH3P"
    "97xg31t4/wAhHZfl"
)


def test_a_reader_that_spins_is_stopped_by_the_input_size():
    """A 1 KB file that jaxlib's reader never finishes was declared corrupt only after a 60 s watchdog; the
    reader's CPU time is now bounded by the input's size (2 s for 1 KB)."""
    import base64
    import time
    import zlib

    data = zlib.decompress(base64.b64decode("".join(_SPINNING_ARTIFACT)))
    check_bytecode(data)  # well-framed: only reading it shows the problem
    start = time.perf_counter()
    with pytest.raises(MlirParseError, match=r"jaxlib's reader spun for 2\.\d s of CPU time on these 741 bytes"):
        import_jax(data)
    assert time.perf_counter() - start < 30


def test_large_real_programs_pass_the_check():
    """The size-bound limits leave real programs room: 6k ops (~100 KB of op-dense bytecode)."""
    import jax
    import jax.numpy as jnp

    from interop.stablehlo.bytecode_check import check_in_subprocess

    def f(x):
        for i in range(1500):
            x = jnp.sin(x) * (i + 1.5) + x[::-1]
        return x

    data = bytes(jax.export.export(jax.jit(f))(np.ones(7, np.float32)).mlir_module_serialized)
    assert len(data) > 50_000
    check_in_subprocess(data)


def test_a_crashing_child_prints_nothing_with_faulthandler_on(tmp_path):
    """The forked child inherited faulthandler's own copy of the caller's stderr descriptor (pytest enables it
    so): each input jaxlib aborts on printed 'Fatal Python error: Aborted' and the caller's stack."""
    import subprocess
    import sys

    path = tmp_path / "prog.mlirbc"
    path.write_bytes(_artifact())
    script = ("import faulthandler, os, sys, interop.stablehlo.bytecode_check as b\n"
              "faulthandler.enable(os.fdopen(os.dup(2), 'w'))  # as pytest does\n"
              "b._child_main = lambda *args: os.abort()\n"
              "from interop import import_jax\n"
              "from xla_dialect.errors import MlirParseError\n"
              "try:\n    import_jax(open(sys.argv[1], 'rb').read())\n"
              "except MlirParseError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert "jaxlib crashed reading this input (signal 6)" in done.stdout
    assert "Fatal Python error" not in done.stderr, done.stderr
