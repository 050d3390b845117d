"""The store's run lock: exclusive while held, free once released, refuses a planted file, writes nothing
when only checked (an old store without a lock file stays byte for byte as it was)."""

from __future__ import annotations

import os

import pytest

from fedforget.store import StoreError
from fedforget.store.lock import LOCK_FILE, StoreBusy, check_not_busy, store_run_lock


def test_a_second_holder_is_refused_in_one_line_naming_the_first_and_free_after_release(tmp_path):
    with store_run_lock(tmp_path, "retrain"):
        with pytest.raises(StoreBusy) as busy, store_run_lock(tmp_path, "propagate"):
            pass
        with pytest.raises(StoreBusy):
            check_not_busy(tmp_path)
    message = str(busy.value)
    assert "\n" not in message and f"a retrain run (pid {os.getpid()} on" in message
    check_not_busy(tmp_path)
    with store_run_lock(tmp_path, "retrain"):
        pass


def test_checking_a_store_that_was_never_locked_writes_nothing(tmp_path):
    check_not_busy(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_symlink_planted_as_the_lock_file_is_refused_and_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / LOCK_FILE).symlink_to(target)
    with pytest.raises(StoreError, match="symbolic link"), store_run_lock(tmp_path, "retrain"):
        pass
    with pytest.raises(StoreError, match="symbolic link"):
        check_not_busy(tmp_path)
    assert target.read_text() == "keep"


def test_a_retrain_lock_on_a_missing_store_is_refused_without_creating_it(tmp_path):
    with pytest.raises(StoreError, match="no such directory"), store_run_lock(tmp_path / "absent", "retrain"):
        pass
    assert not (tmp_path / "absent").exists()
    with store_run_lock(tmp_path / "fresh", "train"):  # a training run creates its store, owner-only
        assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o700
