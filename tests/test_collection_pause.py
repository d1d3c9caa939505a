"""lowering.runtime.collection_pause: fewer garbage collections while a program compiles, the process's own
thresholds put back after it (and left alone where the process set them)."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import lowering
from lowering.executor.executable import Executable
from lowering.runtime.collection_pause import COMPILE_THRESHOLD, fewer_collections
from xla_dialect import XlaBuilder
from xla_dialect.errors import ExecutionError


@pytest.fixture(autouse=True)
def default_thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def _axpy():
    builder = XlaBuilder("axpy")
    alpha = builder.parameter(0, "f32[]", "alpha")
    x = builder.parameter(1, "f32[10]", "x")
    builder.add(builder.mul(alpha, x), x)
    return builder.build()


def test_compile_and_the_first_call_run_with_fewer_collections(monkeypatch):
    seen: list[tuple] = []
    import passes.pipelines

    prepare = passes.pipelines.prepare_for_execution

    def recording_prepare(*args, **kwargs):
        seen.append(("compile", gc.get_threshold()))
        return prepare(*args, **kwargs)

    check = Executable._check_args

    def recording_check(self, args):
        seen.append(("call", gc.get_threshold()))
        return check(self, args)

    monkeypatch.setattr(passes.pipelines, "prepare_for_execution", recording_prepare)
    monkeypatch.setattr(Executable, "_check_args", recording_check)
    exe = lowering.compile(_axpy())
    assert gc.get_threshold() == (700, 10, 10)
    x = np.arange(10, dtype=np.float32)
    for _ in range(2):
        (out,) = exe(np.float32(2), x)
        np.testing.assert_array_equal(out, 3 * x)
        assert gc.get_threshold() == (700, 10, 10)
    assert seen == [("compile", (COMPILE_THRESHOLD, 10, 10)), ("call", (COMPILE_THRESHOLD, 10, 10)),
                    ("call", (700, 10, 10))]  # (the second call as the process set it)


def test_thresholds_come_back_after_a_compile_error():
    with pytest.raises(ExecutionError, match="no function @nope"):
        lowering.compile(_axpy(), entry="nope")
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("thresholds", [(0, 10, 10), (2 * COMPILE_THRESHOLD, 5, 5)], ids=["disabled", "larger"])
def test_thresholds_the_process_chose_are_left_alone(thresholds):
    gc.set_threshold(*thresholds)
    with fewer_collections():
        assert gc.get_threshold() == thresholds
    lowering.compile(_axpy())(np.float32(1), np.zeros(10, np.float32))
    assert gc.get_threshold() == thresholds


def test_a_change_made_during_a_compilation_is_kept():
    with fewer_collections():
        gc.set_threshold(5000, 10, 10)
    assert gc.get_threshold() == (5000, 10, 10)


def test_overlapping_pauses_restore_once_when_the_last_ends():
    entered, release = threading.Event(), threading.Event()

    def other():
        with fewer_collections():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    entered.wait(10)
    with fewer_collections():
        with fewer_collections():
            assert gc.get_threshold()[0] == COMPILE_THRESHOLD
    assert gc.get_threshold()[0] == COMPILE_THRESHOLD  # (the other thread's compilation still runs)
    release.set()
    thread.join(10)
    assert gc.get_threshold() == (700, 10, 10)
