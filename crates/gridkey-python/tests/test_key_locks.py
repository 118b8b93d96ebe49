"""gridkey.KeyLocks: the Rust per-key lock (gridkey-fs, ADR 0025) with its bounded wait (ADR 0033), from Python."""

from __future__ import annotations

from typing import Any
from pathlib import Path

import os
import signal
import subprocess
import sys
import time

import pytest

import gridkey


def locks(tmp_path: Path, wait: float) -> Any:
    return gridkey.KeyLocks(tmp_path / "cache", settings=gridkey.Settings.from_vars({"GRIDKEY_LOCK_WAIT": str(wait)}))


def test_a_held_lock_makes_the_next_taker_give_up_after_the_bound(tmp_path: Path) -> None:
    first, second = locks(tmp_path, 30), locks(tmp_path, 0.3)
    assert (first.wait, second.wait) == (30.0, 0.3)
    held = first.lock("gt4py-translation-0123")
    assert held.held and not held.gave_up and held.waited == 0.0
    assert held.path == tmp_path / "cache" / "locks" / "gt4py-translation-0123.lock" == first.path("gt4py-translation-0123")
    assert held.path.is_file()
    started = time.monotonic()
    other = second.lock("gt4py-translation-0123")
    assert not other.held and other.gave_up and 0.3 <= other.waited < 5 and time.monotonic() - started >= 0.3
    # another key is free
    with second.lock("gt4py-translation-4567") as free:
        assert free.held
    assert not free.held
    held.release()
    assert not held.held and not held.path.exists()
    held.release()  # a second release does nothing
    again = second.lock("gt4py-translation-0123")
    assert again.held and again.waited == 0.0


def test_the_wait_comes_from_the_settings(tmp_path: Path) -> None:
    assert gridkey.Settings.from_vars({}).key_lock_wait == 60.0
    assert gridkey.Settings.from_vars({"GRIDKEY_LOCK_WAIT": "2.5"}).key_lock_wait == 2.5
    with pytest.raises(gridkey.SettingsError, match="GRIDKEY_LOCK_WAIT"):
        gridkey.Settings.from_vars({"GRIDKEY_LOCK_WAIT": "-1"})
    default = gridkey.KeyLocks(settings=gridkey.Settings.from_vars({"GRIDKEY_CACHE_DIR": str(tmp_path / "c")}))
    assert default.dir == tmp_path / "c" / "locks" and default.wait == 60.0


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "../x", "x" * 201, "sp ace", "nul\0"])
def test_a_name_that_is_not_a_plain_file_name_is_refused(tmp_path: Path, name: Any) -> None:
    with pytest.raises(gridkey.TableValueError, match="lock name"):
        locks(tmp_path, 1).lock(name)
    assert not (tmp_path / "cache" / "locks").exists()


def test_a_holder_killed_with_sigkill_does_not_block_the_next(tmp_path: Path) -> None:
    code = (
        "import sys, time, gridkey\n"
        f"held = gridkey.KeyLocks({str(tmp_path / 'cache')!r}).lock('k')\n"
        "print(held.held, flush=True)\n"
        "time.sleep(600)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        assert locks(tmp_path, 0.2).lock("k").gave_up  # held by the live holder
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        started = time.monotonic()
        taken = locks(tmp_path, 30).lock("k")
        assert taken.held and time.monotonic() - started < 5
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
