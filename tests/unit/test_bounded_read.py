"""Files the coordinator reads are read in bounded time and memory: a fifo, a device, a directory or a file
over its bound is refused in one line before it is read, and artifacts are hashed in chunks."""

from __future__ import annotations

import hashlib
import os
import resource

import pytest

from fedforget.store.bounded_read import CHUNK_BYTES, UnreadableFile, read_bounded, sha256_bounded


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.timeout(60)  # a regression would block on the fifo's open until a writer came
@pytest.mark.parametrize("reader", [lambda p: read_bounded(p, 1024, "key"), lambda p: sha256_bounded(p, 1024, "key")])
def test_a_fifo_a_device_or_a_directory_is_refused_without_reading(tmp_path, fifo, reader):
    for path, kind in ((fifo, "a fifo"), ("/dev/zero", "a device"), (tmp_path, "a directory")):
        with pytest.raises(UnreadableFile, match=f"is {kind}, not a regular file") as exc:
            reader(path)
        assert "\n" not in str(exc.value) and str(path) in str(exc.value)


def test_a_file_over_its_bound_is_refused_by_size_before_any_byte_is_read(tmp_path):
    sparse = tmp_path / "huge.safetensors"
    with open(sparse, "wb") as fh:
        fh.truncate(100 * 2**30)  # 100 GiB, sparse: what `truncate -s 100G` leaves
    assert sparse.stat().st_size == 100 * 2**30  # control: the file claims 100 GiB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for reader in (read_bounded, sha256_bounded):
        with pytest.raises(UnreadableFile, match="no artifact is that large"):
            reader(sparse, 2**30, "artifact")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 2**10  # KiB: nothing was buffered


def test_within_its_bound_a_file_is_read_whole_and_hashed_in_chunks(tmp_path):
    path = tmp_path / "f"
    data = os.urandom(3 * CHUNK_BYTES + 17)
    path.write_bytes(data)
    assert read_bounded(path, len(data), "artifact") == data
    assert sha256_bounded(path, len(data), "artifact") == hashlib.sha256(data).hexdigest()
    with pytest.raises(UnreadableFile):
        read_bounded(path, len(data) - 1, "artifact")


def test_a_missing_file_is_file_not_found_saying_it_does_not_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_bounded(tmp_path / "missing", 10, "key")


def test_a_small_file_under_a_huge_bound_reserves_only_its_own_size(tmp_path):
    # a read that asked for the bound would reserve it: 2**62 bytes is no address space anywhere
    path = tmp_path / "small"
    path.write_bytes(b"x" * 100)
    assert read_bounded(path, 2**62, "artifact") == b"x" * 100


def test_a_file_that_grows_while_read_is_read_to_its_end_or_refused_past_the_bound(tmp_path, monkeypatch):
    import fedforget.store.bounded_read as bounded

    path = tmp_path / "growing"
    path.write_bytes(b"a" * 10)
    opened = bounded.open_regular

    def grow_after_fstat(*args):  # noqa: ANN002, ANN202
        fd, size = opened(*args)
        with open(path, "ab") as fh:
            fh.write(b"b" * (3 * CHUNK_BYTES))
        return fd, size

    monkeypatch.setattr(bounded, "open_regular", grow_after_fstat)
    assert read_bounded(path, 4 * CHUNK_BYTES, "metrics file") == b"a" * 10 + b"b" * (3 * CHUNK_BYTES)
    path.write_bytes(b"a" * 10)
    with pytest.raises(UnreadableFile, match="grew past"):
        read_bounded(path, 2 * CHUNK_BYTES, "metrics file")
