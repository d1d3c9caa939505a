"""numba's on-disk cache under several processes (lowering/numba_cache.py).

CI saw ``TypeError: can't unbox array from PyObject into native value`` on seven f32 x f64 dots of the conformance
corpus: two ``xla-conformance --jobs 2`` workers had saved two signatures of one kernel under the same data file
name, so the index named one signature and the file held the other's code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import lowering  # noqa: F401  (installs the cache fix)
from lowering import numba_cache

MODULE = textwrap.dedent(
    """
    import numba

    @numba.njit(cache=True)
    def total(x):
        s = x.dtype.type(0)
        for v in x:
            s += v
        return s
    """
)

SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {folder!r})
    if {with_fix!r}:
        import lowering
    import numpy as np
    import racy
    print(float(racy.total(np.arange(4, dtype={dtype!r}))))
    """
)


def _run(folder: str, cache_dir: str, dtype: str, with_fix: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    script = SCRIPT.format(folder=folder, dtype=dtype, with_fix=with_fix)
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)


def test_an_entry_holding_another_signatures_code_is_recompiled(tmp_path):
    # Build exactly what two racing processes leave behind: the index maps float32 to data file 1, and data file 1
    # holds the float64 overload. Without the check, loading it calls float64 code with a float32 array.
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "racy.py").write_text(MODULE)
    cache_f32, cache_f64 = str(tmp_path / "cache32"), str(tmp_path / "cache64")
    for cache, dtype in ((cache_f32, "float32"), (cache_f64, "float64")):
        done = _run(str(folder), cache, dtype)
        assert done.returncode == 0 and done.stdout.strip() == "6.0", done.stderr
    data_files = {}
    for cache in (cache_f32, cache_f64):
        for root, _, files in os.walk(cache):
            for name in files:
                if name.endswith(".1.nbc"):
                    data_files[cache] = os.path.join(root, name)
    assert set(data_files) == {cache_f32, cache_f64}
    shutil.copyfile(data_files[cache_f64], data_files[cache_f32])

    broken = _run(str(folder), cache_f32, "float32", with_fix=False)
    assert broken.returncode != 0 and "unbox" in broken.stderr, "the corrupted cache no longer reproduces the failure"
    healed = _run(str(folder), cache_f32, "float32")
    assert healed.returncode == 0 and healed.stdout.strip() == "6.0", healed.stderr
    again = _run(str(folder), cache_f32, "float32", with_fix=False)  # the entry was rewritten with the right code
    assert again.returncode == 0 and again.stdout.strip() == "6.0", again.stderr


@pytest.mark.skipif(numba_cache.fcntl is None, reason="file locks need POSIX fcntl")
def test_a_save_reads_and_writes_the_index_inside_an_exclusive_lock(tmp_path, monkeypatch):
    from numba.core import caching

    events = []
    real_flock = numba_cache.fcntl.flock

    def recording_flock(fd, operation):
        events.append(("flock", operation, os.readlink(f"/proc/self/fd/{fd}")))
        return real_flock(fd, operation)

    monkeypatch.setattr(numba_cache.fcntl, "flock", recording_flock)

    class RecordingCacheFile:  # what numba's save uses of an IndexDataCacheFile
        _index_path = str(tmp_path / "f.nbi")

        def _load_index(self):
            events.append("load index")
            return {}

        def _save_index(self, overloads):
            events.append("save index")

        def _save_data(self, name, data):
            events.append("save data")

        def _data_name(self, i):
            return f"f.{i}.nbc"

    caching.IndexDataCacheFile.save(RecordingCacheFile(), "key", "data")
    lock = str(tmp_path / "f.nbi.lock")
    assert events == [("flock", numba_cache.fcntl.LOCK_EX, lock), "load index", "save index", "save data",
                      ("flock", numba_cache.fcntl.LOCK_UN, lock)]


def test_install_is_idempotent_and_patches_numba():
    from numba.core import caching

    save = caching.IndexDataCacheFile.save
    numba_cache.install()
    assert caching.IndexDataCacheFile.save is save
    assert save.__wrapped__ is not save
