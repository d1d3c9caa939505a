"""The generated-code cache's size limit (lowering/runtime/cache_size.py) and ``xla-cache``."""

from __future__ import annotations

import os
import time

import jax
import numpy as np
import pytest

import lowering
from interop import import_jax
from interop.tools import cache_cli
from lowering.runtime import cache_size
from xla_dialect.errors import UnsupportedError


def _entry(directory, name: str, size: int, age: float, machine_code: int = 0) -> list[str]:
    """A fake cache entry: module file ``name`` of ``size`` bytes last used ``age`` seconds ago, with
    ``machine_code`` numba files beside it."""
    paths = [os.path.join(directory, name)]
    with open(paths[0], "wb") as f:
        f.write(b"x" * size)
    stem = name.split(".")[0]
    os.makedirs(os.path.join(directory, "__pycache__"), exist_ok=True)
    for k in range(machine_code):
        path = os.path.join(directory, "__pycache__", f"{stem}.loop-{k}.py311.nbi")
        with open(path, "wb") as f:
            f.write(b"y" * size)
        paths.append(path)
    when = time.time() - age
    for path in paths:
        os.utime(path, (when, when))
    return paths


def test_sizes_parse_with_units_and_bad_ones_are_errors():
    assert cache_size.parse_size("1073741824") == 1 << 30
    assert cache_size.parse_size("500M") == 500 << 20
    assert cache_size.parse_size("2G") == cache_size.parse_size("2GiB") == cache_size.parse_size("2gb") == 2 << 30
    assert cache_size.parse_size("1.5K") == 1536
    assert cache_size.parse_size("unlimited") is None
    for bad in ("", "lots", "-1G", "2X"):
        with pytest.raises(UnsupportedError, match="expected bytes"):
            cache_size.parse_size(bad)


def test_the_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(cache_size.ENVIRONMENT, raising=False)
    assert cache_size.size_limit() == cache_size.DEFAULT_LIMIT
    monkeypatch.setenv(cache_size.ENVIRONMENT, "300M")
    assert cache_size.size_limit() == 300 << 20
    monkeypatch.setenv(cache_size.ENVIRONMENT, "unlimited")
    assert cache_size.size_limit() is None
    monkeypatch.setenv(cache_size.ENVIRONMENT, "much")
    with pytest.raises(UnsupportedError, match=r"\$XLA_DIALECT_CACHE_SIZE: cache size 'much'"):
        cache_size.size_limit()


def test_prune_removes_least_recently_used_entries_with_their_machine_code(tmp_path):
    d = str(tmp_path)
    oldest = _entry(d, "loop_" + "a" * 24 + ".py", 1000, age=5000, machine_code=2)
    old_index = _entry(d, "loop_" + "b" * 24 + ".ints", 1000, age=4000)
    newer = _entry(d, "loop_" + "c" * 24 + ".py", 1000, age=3000, machine_code=1)
    recent = _entry(d, "ufunc_" + "d" * 24 + ".py", 1000, age=10)
    leftover = _entry(d, "loop_" + "9" * 24 + ".py.1234.5678.tmp", 0, age=90000)  # (a killed writer's)
    other = os.path.join(d, "notes.txt")  # (not the cache's: left alone)
    open(other, "w").close()
    found = {e.name: e for e in cache_size.entries(d)}
    assert set(found) == {"loop_" + "a" * 24, "loop_" + "b" * 24 + ".ints", "loop_" + "c" * 24, "ufunc_" + "d" * 24,
                          "loop_" + "9" * 24 + ".py.1234.5678.tmp"}
    assert found["loop_" + "a" * 24].size == 3000 and len(found["loop_" + "a" * 24].files) == 3
    assert found["loop_" + "a" * 24].files[-1] == oldest[0]  # (the module file last)

    report = cache_size.prune(d, limit=4000, target=0.8)  # 7,000 bytes -> at most 3,200
    assert (report.entries, report.size, report.removed_entries, report.removed_size) == (5, 7000, 3, 4000)
    assert not any(os.path.exists(p) for p in leftover + oldest + old_index)
    assert all(os.path.exists(p) for p in newer + recent + [other])

    report = cache_size.prune(d, limit=100)  # the recent entry is in its grace period
    assert report.removed_entries == 1 and all(os.path.exists(p) for p in recent)
    assert not any(os.path.exists(p) for p in newer)
    assert cache_size.clear(d).removed_entries == 1 and not os.path.exists(recent[0]) and os.path.exists(other)


def test_under_the_limit_or_unlimited_nothing_is_removed(tmp_path):
    d = str(tmp_path)
    paths = _entry(d, "loop_" + "e" * 24 + ".py", 500, age=9000, machine_code=1)
    assert cache_size.prune(d, limit=1000).removed_entries == 0
    assert cache_size.prune(d, limit=None).removed_entries == 0
    assert all(os.path.exists(p) for p in paths)


def test_a_use_sets_the_access_time_and_keeps_numbas_stamp(tmp_path):
    path = _entry(str(tmp_path), "loop_" + "f" * 24 + ".py", 10, age=7200)[0]
    mtime = os.stat(path).st_mtime
    cache_size.mark_used(path)
    st = os.stat(path)
    assert st.st_mtime == mtime and time.time() - st.st_atime < 60
    cache_size.mark_used(str(tmp_path / "gone.py"))  # (a removed file: nothing to record, no error)


def test_background_prune_runs_at_most_once_per_interval(tmp_path, monkeypatch):
    d = str(tmp_path)
    monkeypatch.setenv(cache_size.ENVIRONMENT, "1000")
    monkeypatch.setattr(cache_size, "_STARTED", set())
    paths = _entry(d, "loop_" + "1" * 24 + ".py", 2000, age=9000)
    thread = cache_size.prune_in_background(d)
    assert thread is not None
    thread.join(60)
    assert not os.path.exists(paths[0]) and os.path.exists(os.path.join(d, ".pruned"))
    assert cache_size.prune_in_background(d) is None  # (this process started one)
    monkeypatch.setattr(cache_size, "_STARTED", set())
    assert cache_size.prune_in_background(d) is None  # (the stamp: pruned less than an hour ago)


def test_a_program_runs_again_after_its_cache_is_cleared(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XLA_DIALECT_CACHE", str(tmp_path))
    x = np.linspace(-1, 1, 6, dtype=np.float32)

    def f(x):
        return jax.lax.fori_loop(0, 30, lambda i, v: v * 0.9 + jax.numpy.sin(v), x)

    module = import_jax(f, x)
    (first,) = lowering.compile(module, loop_compilation="always")(x)
    directory = os.path.join(str(tmp_path), "loops")
    assert cache_size.entries(directory), "the compiled loop left no cache entry"

    assert cache_cli.main(["info"]) == 0
    assert f"cache: {directory}" in capsys.readouterr().out
    assert cache_cli.main(["prune", "--to", "unlimited"]) == 0
    assert "removed 0 of" in capsys.readouterr().out
    assert cache_cli.main(["clear"]) == 0
    assert "removed" in capsys.readouterr().out and cache_size.entries(directory) == []
    assert cache_cli.main(["prune", "--to", "lots"]) == 1
    assert "xla-cache: error: cache size 'lots'" in capsys.readouterr().err

    (again,) = lowering.compile(module, loop_compilation="always")(x)  # (generated and compiled afresh)
    assert again.tobytes() == first.tobytes() == np.asarray(jax.jit(f)(x)).tobytes()


def test_generated_modules_code_is_cached_beside_numbas_and_never_stale(tmp_path):
    """A generated module's code object is compiled once and kept in ``__pycache__`` (also where
    ``PYTHONDONTWRITEBYTECODE`` keeps Python from writing ``.pyc`` files), as part of the module's cache entry; a
    changed or damaged file is compiled again."""
    import sys

    from lowering.runtime.process_state import module_code

    path = tmp_path / "loop_0123456789abcdef01234567.py"
    path.write_text("VALUE = 1\n")
    namespace: dict = {}
    exec(module_code(str(path)), namespace)  # noqa: S102
    assert namespace["VALUE"] == 1
    cached = tmp_path / "__pycache__" / f"{path.stem}.{sys.implementation.cache_tag}.code"
    assert cached.exists()
    assert module_code(str(path)).co_filename == str(path)  # (numba finds a function's cache by its file)
    path.write_text("VALUE = 2\n")
    exec(module_code(str(path)), namespace)  # noqa: S102
    assert namespace["VALUE"] == 2
    cached.write_bytes(b"not a code object")
    exec(module_code(str(path)), namespace)  # noqa: S102
    assert namespace["VALUE"] == 2
    entry = next(e for e in cache_size.entries(str(tmp_path)) if e.name == path.stem)
    assert str(cached) in entry.files and str(path) in entry.files  # (removed together past the size limit)
