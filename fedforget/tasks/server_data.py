"""The server's own test set: what the ServerApp and the coordinator evaluate on, without the training rows.

A shipped task's public data set holds both splits in one file, so a process that reads it has read every
client's training rows. The server therefore reads one of two things, never that file:

- run-config ``test-data``: a directory of records in the node data format (its ``test`` split), the
  server's explicit test set; a row's id is its position, 0..n-1.
- else a **test-only copy** of the task's test split in ``cache_dir()/test-splits/<sha256 of its key>/``:
  ``test.safetensors`` (inputs, labels, ids) and ``test.json`` (the key, ``num_classes``, the tensor
  file's size and sha256). A missing, foreign or torn copy is written again by a *separate process*
  (``python -m fedforget.server_test_writer write``, the run config as JSON on stdin), so the calling
  process never opens the public file. ``make setup`` writes the copies of the shipped tasks' defaults.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedforget.core.config import ConfigError, HfConfig, RunConfig, is_user_task
from fedforget.tasks.assets import cache_dir
from fedforget.tasks.base import Examples

#: Raised when the loaders change what a test split holds: old copies then stop matching and are rewritten.
COPY_FORMAT = 1
TENSORS, META = "test.safetensors", "test.json"
#: Tasks whose test rows are drawn from the ``train-size`` subset (a validation cut of the training rows).
TEST_READS_TRAIN_SIZE = frozenset({"rt-smollm-val"})
#: A copy's json is a few hundred bytes; its tensors a test split's (fmnist-effnet's 10,000 images at most).
MAX_META_BYTES = 64 * 1024
MAX_TENSOR_BYTES = 8 * 1024**3
#: How long the writer may take: a Hub data set is downloaded and tokenized there.
WRITE_TIMEOUT_S = 3600.0
#: The node name the server's records are read under (``test-data``).
SERVER_NODE = "server"


class ServerTestError(RuntimeError):
    """The server's test set cannot be had; the one-line message says what to do."""


@dataclass
class ServerTest:
    """The rows the server evaluates on, the task's class count, and where they came from."""

    examples: Examples
    num_classes: int
    source: str


def copy_key(cfg: RunConfig) -> dict[str, Any]:
    """Everything a task's test split depends on (the loaders in fedforget/tasks/), and nothing else."""
    return {
        "format": COPY_FORMAT,
        "task": cfg.task,
        "test-size": cfg.test_size,
        "train-size": cfg.train_size if cfg.task in TEST_READS_TRAIN_SIZE else 0,
        "hf.dataset": cfg.hf.dataset if cfg.task == "hf" else "",
        "hf.model": cfg.hf.model if cfg.task == "hf" else "",
        "hf.input-column": cfg.hf.input_column if cfg.task == "hf" else "",
        "hf.label-column": cfg.hf.label_column if cfg.task == "hf" else "",
    }


def key_config(key: dict[str, Any]) -> RunConfig:
    """The smallest run config a key names: the writer loads exactly what the key says."""
    hf = HfConfig(dataset=key["hf.dataset"], model=key["hf.model"], input_column=key["hf.input-column"],
                  label_column=key["hf.label-column"]) if key["task"] == "hf" else HfConfig()
    return RunConfig(task=key["task"], test_size=key["test-size"], train_size=key["train-size"], tables=(hf,))


def copy_dir(key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return cache_dir() / "test-splits" / digest


# -- reading --------------------------------------------------------------------------------------------------
def read_copy(folder: Path, key: dict[str, Any]) -> ServerTest | None:
    """The copy in ``folder`` if it is whole and is this key's; None if absent, foreign, torn or unreadable."""
    from safetensors.torch import load

    try:
        meta_path, tensor_path = folder / META, folder / TENSORS
        if meta_path.stat().st_size > MAX_META_BYTES:
            return None
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        size = meta["bytes"]
        if meta["key"] != key or not isinstance(size, int) or not 0 < size <= MAX_TENSOR_BYTES:
            return None
        if tensor_path.stat().st_size != size:
            return None
        blob = tensor_path.read_bytes()
        if hashlib.sha256(blob).hexdigest() != meta["sha256"]:
            return None
        tensors = _with_strides(load(blob), meta["strides"])
        return _as_test(tensors, meta["num_classes"], f"test-only copy {folder}")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _with_strides(tensors: dict[str, torch.Tensor], strides: object) -> dict[str, torch.Tensor]:
    """Each tensor laid out with the strides the loader gave it: convolution kernels are picked by layout (a
    (N, 1, H, W) batch with a unit channel stride reads as channels-last), so equal values are not enough."""
    if not isinstance(strides, dict) or set(strides) != set(tensors):
        raise ValueError("the copy's strides do not name its tensors")
    out = {}
    for name, t in tensors.items():
        want = strides[name]
        if not (isinstance(want, list) and len(want) == t.dim() and _dense(list(t.shape), want)):
            raise ValueError(f"the copy's strides of {name} are not a dense layout of its shape")
        laid = torch.empty_strided(tuple(t.shape), tuple(want), dtype=t.dtype)
        out[name] = laid.copy_(t)
    return out


def _dense(shape: list[int], strides: list[object]) -> bool:
    """Whether ``strides`` lay ``shape`` out densely with no element twice (size-1 dimensions: any stride)."""
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in strides):
        return False
    if 0 in shape:
        return True
    expected = 1
    for size, stride in sorted(((n, s) for n, s in zip(shape, strides, strict=True) if n != 1), key=lambda p: p[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def _as_test(tensors: dict[str, torch.Tensor], num_classes: object, source: str) -> ServerTest | None:
    """The tensors as a test set, if they are exactly what a copy holds."""
    n_inputs = len(tensors) - 2
    names = {"labels", "ids", *(f"input.{i}" for i in range(n_inputs))}
    if n_inputs < 1 or set(tensors) != names or not isinstance(num_classes, int) or isinstance(num_classes, bool):
        return None
    labels, ids = tensors["labels"], tensors["ids"]
    if labels.dtype != torch.int64 or ids.dtype != torch.int64 or labels.dim() != 1 or ids.dim() != 1:
        return None
    if num_classes < 1 or (len(labels) and not 0 <= int(labels.min()) <= int(labels.max()) < num_classes):
        return None
    examples = Examples(tuple(tensors[f"input.{i}"] for i in range(n_inputs)), labels, ids)
    return ServerTest(examples, num_classes, source)


# -- writing (the separate process) ---------------------------------------------------------------------------
def write_copy(cfg: RunConfig) -> Path:
    """Load the task (both splits) and write its test split's copy: only ever run in the writer process."""
    from safetensors.torch import save

    from fedforget.tasks.registry import load_task_data

    key = copy_key(cfg)
    data = load_task_data(key_config(key))
    test = data.test
    blob = save({name: t.contiguous() for name, t in _named(test).items()})
    meta = {"key": key, "num_classes": int(data.num_classes), "bytes": len(blob),
            "sha256": hashlib.sha256(blob).hexdigest(),
            "strides": {name: list(t.stride()) for name, t in _named(test).items()}}
    folder = copy_dir(key)
    folder.mkdir(parents=True, exist_ok=True)
    # each file replaced whole; the json (which names the tensors' digest) last, so a reader that sees the new
    # json sees the new tensors, and one that sees a mismatch has the copy written again
    _replace(folder / TENSORS, blob)
    _replace(folder / META, json.dumps(meta, sort_keys=True).encode())
    return folder


def _named(examples: Examples) -> dict[str, torch.Tensor]:
    return {"labels": examples.labels, "ids": examples.ids, **{f"input.{i}": t for i, t in enumerate(examples.inputs)}}


def _replace(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _run_writer(cfg: RunConfig) -> None:
    """``python -m fedforget.server_test_writer write`` on this config; its one-line error as ours."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    if package_root not in {str(Path(p).resolve()) for p in sys.path if p}:
        # this fedforget came from outside the path (a checkout beside an installed copy): the writer imports it
        # too; a root already on the path (site-packages) is left where it is, after the standard library
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run([sys.executable, "-m", WRITER, "write"],
                              input=json.dumps(cfg.to_dict()), capture_output=True, text=True, env=env,
                              timeout=WRITE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise ServerTestError(f"writing the test-only copy of task {cfg.task!r} took over {WRITE_TIMEOUT_S:.0f} s; "
                              "run `python -m fedforget.server_test_writer write-defaults` and retry") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise ServerTestError(lines[-1] if lines else f"the test-only copy writer exited {done.returncode}")


# -- the entry point ------------------------------------------------------------------------------------------
def load_server_test(cfg: RunConfig) -> ServerTest:
    """The rows the server evaluates on: ``test-data``'s records, else the task's test-only copy (a user task has
    no public data set, so no copy: :class:`ServerTestError`)."""
    if cfg.test_data:
        return _explicit_test(cfg)
    if is_user_task(cfg.task):
        instead = ("the nodes measured what is served on their own test records (`fedforget status`)"
                   if cfg.evaluate_on_nodes else "set run-config test-data=<records dir>, or evaluate-on-nodes=true "
                   "to measure what is served on the nodes' own test records")
        raise ServerTestError(f"task {cfg.task!r} has no public data set, so the server has no test set: {instead}")
    key = copy_key(cfg)
    folder = copy_dir(key)
    found = read_copy(folder, key)
    if found is None:
        _run_writer(cfg)
        found = read_copy(folder, key)
    if found is None:
        raise ServerTestError(f"the test-only copy in {folder} is unreadable right after it was written; "
                              "remove that folder and retry")
    return found


def server_test_for(cfg: RunConfig) -> ServerTest:
    """The server's test set for a run: :func:`load_server_test`, except that a user task's server without
    ``test-data`` holds none when the nodes evaluate what is served (``evaluate-on-nodes``)."""
    if cfg.evaluate_on_nodes and not cfg.test_data and is_user_task(cfg.task):
        return no_server_test(cfg)
    return load_server_test(cfg)


def no_server_test(cfg: RunConfig) -> ServerTest:
    """No rows, the classes the task declares: a server that measures nothing itself."""
    num_classes = _declared_classes(cfg)
    if num_classes <= 0:
        raise ServerTestError(f"task {cfg.task!r} does not declare its classes; set run-config test-data")
    empty = torch.zeros(0, dtype=torch.int64)
    return ServerTest(Examples((), empty, empty.clone()), num_classes, "none: the nodes evaluate what is served")


def _explicit_test(cfg: RunConfig) -> ServerTest:
    """``test-data``'s ``test`` split as the server's test set, rows numbered 0..n-1."""
    from fedforget.store.store import resolve_store_path

    folder = resolve_store_path(cfg.test_data)
    if not folder.is_dir():
        raise ServerTestError(f"run-config 'test-data' is {cfg.test_data!r}, but {folder} is not a directory; "
                              "point it at a directory holding test.parquet or test.csv")
    num_classes = _declared_classes(cfg)
    if num_classes <= 0:
        raise ServerTestError(f"run-config 'test-data' needs a task that fixes its classes; {cfg.task!r} does not")
    from fedforget.tasks.local_records import encode_rows, read_file_rows

    try:
        rows = read_file_rows(folder, cfg, SERVER_NODE, num_classes, split="test")
        inputs = encode_rows(rows, cfg, SERVER_NODE)
    except ValueError as exc:  # the reader's refusal (NodeDataError), already one line
        raise ServerTestError(f"run-config 'test-data': {exc}") from None
    if not len(rows.labels):
        raise ServerTestError(f"run-config 'test-data' {folder} holds no test records; add some or unset it")
    from fedforget.tasks.sequence_targets import with_targets

    examples = Examples(inputs, torch.from_numpy(rows.labels), torch.arange(len(rows.labels), dtype=torch.int64))
    return ServerTest(with_targets(cfg, examples), num_classes, f"test-data {folder}")


def _declared_classes(cfg: RunConfig) -> int:
    """The task's class count where the task declares it (0: known only from the data)."""
    from fedforget.tasks.registry import get_task

    return int(getattr(get_task(cfg.task), "num_classes", 0) or 0)


def holds_local_records(manifest: dict[str, Any]) -> bool:
    """Whether any node of a store holds its own records (manifest ``nodes``; absent: every node the public
    set's): the coordinator then holds none of the training rows, and no public file has them."""
    from fedforget.core.record_ids import LOCAL_RECORDS

    nodes = manifest.get("nodes") or {}
    if not isinstance(nodes, dict):  # not what a store writes: read nothing on its behalf
        return True
    return any(not isinstance(n, dict) or n.get("records") == LOCAL_RECORDS for n in nodes.values())


# -- the writer's command line --------------------------------------------------------------------------------
#: The shipped tasks whose default configs ``make setup`` writes copies of (``hf`` has no default data set).
SHIPPED_TASKS = ("digits-mlp", "digits-mlp-val", "digits-mlp-perm", "digits-mlp-perm-val", "fmnist-cnn",
                 "fmnist-effnet", "rt-minilm", "rt-smollm", "rt-smollm-val", "fortunes-minilm")


def write_defaults(force: bool) -> int:
    """Each shipped task's default copy (missing or invalid ones, or all with ``force``); a task whose offline
    asset is absent is skipped with a line saying so."""
    from fedforget.tasks.assets import AssetMissing

    for task in SHIPPED_TASKS:
        cfg = RunConfig(task=task)
        key = copy_key(cfg)
        if not force and read_copy(copy_dir(key), key) is not None:
            continue
        try:
            print(f"test-only copy of {task}: {write_copy(cfg)}")
        except AssetMissing as exc:
            print(f"test-only copy of {task}: skipped ({exc})")
    return 0


#: The writer's process: its own module, which assembles the methods before it parses the config it is handed
WRITER = "fedforget.server_test_writer"
#: The run-config keys the writer reads from the config on its stdin (those :func:`copy_key` reads).
WRITER_KEYS = ("task", "test-size", "train-size", "hf.dataset", "hf.model", "hf.input-column", "hf.label-column")


def main(argv: list[str]) -> int:
    if argv == ["write"]:
        try:
            raw = json.loads(sys.stdin.read(MAX_META_BYTES * 16))
            if not isinstance(raw, dict) or "task" not in raw:
                raise ValueError("expected an object with at least 'task'")
            cfg = RunConfig().with_keys({k: raw[k] for k in WRITER_KEYS if k in raw})
            copy_key(cfg)
        except (ValueError, ConfigError, TypeError, AttributeError) as exc:
            print(f"the test-only copy writer needs a run config as JSON on stdin: {exc}", file=sys.stderr)
            return 2
        try:
            write_copy(cfg)
        except Exception as exc:  # noqa: BLE001  (one line for the caller, whatever the loader raised)
            print(f"cannot write the test-only copy of task {cfg.task!r}: {exc}".splitlines()[0], file=sys.stderr)
            return 1
        return 0
    if argv in (["write-defaults"], ["write-defaults", "--force"]):
        return write_defaults(force=len(argv) == 2)
    print("usage: python -m fedforget.server_test_writer write < config.json | write-defaults [--force]",
          file=sys.stderr)
    return 2

