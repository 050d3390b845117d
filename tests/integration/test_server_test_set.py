"""The server's test set: the loader's test split bit for bit, written by another process, never the public file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from fedforget.core.config import RunConfig
from fedforget.tasks import server_data
from fedforget.tasks.assets import AssetMissing
from fedforget.tasks.registry import load_task_data
from fedforget.tasks.server_data import META, TENSORS, WRITER, ServerTestError, copy_dir, copy_key, load_server_test

DIGITS = ("digits-mlp", "digits-mlp-val", "digits-mlp-perm", "digits-mlp-perm-val")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty machine cache, so every copy is written during the test (the writer inherits it)."""
    monkeypatch.setenv("FEDFORGET_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _same(server: server_data.ServerTest, cfg: RunConfig) -> None:
    test = load_task_data(cfg).test
    ours = (*server.examples.inputs, server.examples.labels, server.examples.ids)
    theirs = (*test.inputs, test.labels, test.ids)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
        assert torch.equal(a, b)
    assert server.num_classes == load_task_data(cfg).num_classes


@pytest.mark.parametrize("task", DIGITS)
def test_the_test_only_copy_equals_the_loaders_test_split_bit_for_bit(cache: Path, task: str) -> None:
    cfg = RunConfig(task=task)
    server = load_server_test(cfg)
    assert server.source.startswith("test-only copy") and str(cache) in server.source
    _same(server, cfg)


@pytest.mark.parametrize("task, sizes", [("digits-mlp", {"test_size": 100}), ("fmnist-cnn", {"test_size": 300}),
                                         ("rt-minilm", {"test_size": 64})])
def test_a_subset_copy_equals_the_loaders_test_split_bit_for_bit(cache: Path, task: str, sizes: dict) -> None:
    cfg = RunConfig(task=task, **sizes)
    try:
        load_task_data(cfg)
    except AssetMissing as exc:
        pytest.skip(str(exc))
    _same(load_server_test(cfg), cfg)


AUDIT = textwrap.dedent("""
    import json, sys
    opened = []
    def hook(event, args):
        if event == "open" and args and isinstance(args[0], (str, bytes)):
            opened.append(args[0] if isinstance(args[0], str) else args[0].decode(errors="replace"))
    sys.addaudithook(hook)
    import fedforget.methods.registry  # a process that parses run configs is assembled with the methods
    from fedforget.core.config import RunConfig
    from fedforget.tasks.server_data import load_server_test
    test = load_server_test(RunConfig(task="digits-mlp"))
    server_opened = list(opened)
    if sys.argv[1] == "then-load":
        from fedforget.tasks.registry import load_task_data
        load_task_data(RunConfig(task="digits-mlp"))
    print(json.dumps({"server": server_opened, "all": opened, "rows": len(test.examples)}))
""")


def _audited(cache: Path, mode: str) -> dict:
    env = {**os.environ, "FEDFORGET_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", AUDIT, mode], capture_output=True, text=True, env=env, timeout=300,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _digits_files(paths: list[str]) -> list[str]:
    return [p for p in paths if "digits.csv" in p]


def test_the_server_process_never_opens_the_digits_data_set_while_its_copy_is_written(cache: Path) -> None:
    seen = _audited(cache, "then-load")
    assert seen["rows"] == 360
    assert _digits_files(seen["server"]) == []
    assert any(p.endswith(TENSORS) for p in seen["server"])  # the hook sees the process's opens
    assert _digits_files(seen["all"])  # negative control: loading the task in this process does open it


def test_the_server_process_never_opens_the_digits_data_set_when_its_copy_exists(cache: Path) -> None:
    load_server_test(RunConfig(task="digits-mlp"))
    seen = _audited(cache, "server-only")
    assert _digits_files(seen["all"]) == [] and any(p.endswith(TENSORS) for p in seen["all"])


def test_servers_that_start_together_on_an_empty_cache_all_get_the_copy(cache: Path) -> None:
    script = ("import fedforget.methods.registry; from fedforget.core.config import RunConfig; "
              "from fedforget.tasks.server_data import load_server_test; "
              "print(len(load_server_test(RunConfig(task='digits-mlp')).examples))")
    env = {**os.environ, "FEDFORGET_CACHE": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(3)]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outs]
    assert [out.strip() for out, _ in outs] == ["360"] * 3
    _same(load_server_test(RunConfig(task="digits-mlp")), RunConfig(task="digits-mlp"))
    assert not [p for p in copy_dir(copy_key(RunConfig(task="digits-mlp"))).iterdir() if p.name.startswith(".")]


def _refuse_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(cfg: RunConfig) -> None:
        raise AssertionError("an intact copy was written again")

    monkeypatch.setattr(server_data, "_run_writer", refuse)


def test_an_intact_copy_is_read_without_writing_it_again(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = RunConfig(task="digits-mlp")
    load_server_test(cfg)
    _refuse_writer(monkeypatch)
    _same(load_server_test(cfg), cfg)


@pytest.mark.parametrize("damage", ["flip-a-byte", "truncate", "foreign-copy", "garbage-json", "no-tensors"])
def test_a_torn_or_foreign_copy_is_written_again_never_used(cache: Path, damage: str) -> None:
    cfg = RunConfig(task="digits-mlp")
    folder = load_server_test(cfg) and copy_dir(copy_key(cfg))
    tensors = folder / TENSORS
    if damage == "flip-a-byte":
        blob = bytearray(tensors.read_bytes())
        blob[-5] ^= 0x40  # inside the last float: a copy that still parses
        tensors.write_bytes(bytes(blob))
    elif damage == "truncate":
        tensors.write_bytes(tensors.read_bytes()[:1000])
    elif damage == "foreign-copy":  # another key's whole copy in this key's folder
        other = RunConfig(task="digits-mlp-perm")
        other_folder = load_server_test(other) and copy_dir(copy_key(other))
        for name in (TENSORS, META):
            (folder / name).write_bytes((other_folder / name).read_bytes())
    elif damage == "garbage-json":
        (folder / META).write_bytes(b"\x00not json")
    else:
        tensors.unlink()
    _same(load_server_test(cfg), cfg)
    assert server_data.read_copy(folder, copy_key(cfg)) is not None


def test_a_copy_that_stays_unreadable_after_writing_is_refused_in_one_line(cache: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_data, "_run_writer", lambda cfg: None)  # a writer that writes nothing
    with pytest.raises(ServerTestError) as err:
        load_server_test(RunConfig(task="digits-mlp"))
    assert "\n" not in str(err.value) and "remove that folder" in str(err.value)


def test_a_writer_that_fails_says_why_in_one_line(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("FEDFORGET_FMNIST_DIR", str(tmp_path / "no-fmnist"))
    with pytest.raises(ServerTestError) as err:
        load_server_test(RunConfig(task="fmnist-cnn", test_size=10))
    assert "\n" not in str(err.value) and "Fashion-MNIST not found" in str(err.value)
    assert not any(copy_dir(copy_key(RunConfig(task="fmnist-cnn", test_size=10))).glob("*"))


@pytest.mark.parametrize("stdin", ["", "{", "[1]", '{"task": "no-such-task"}'])
def test_the_writer_refuses_a_bad_config_in_one_line(cache: Path, stdin: str) -> None:
    done = subprocess.run([sys.executable, "-m", WRITER, "write"], input=stdin,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode in (1, 2) and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not cache.joinpath("test-splits").exists() or not any(cache.joinpath("test-splits").rglob("*.json"))


def test_a_test_data_path_that_is_no_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    cfg = RunConfig(task="digits-mlp").with_keys({"test-data": str(tmp_path / "absent")})
    with pytest.raises(ServerTestError) as err:
        load_server_test(cfg)
    assert "\n" not in str(err.value) and "test-data" in str(err.value)
