"""One run writes a store at a time, a killed CLI ends the Flower run it started, `--json` is JSON alone.

The lock is the real one (``fedforget.store.lock``), taken by a separate live process; the Flower runs
are real ServerApp runs in process, submitted through the real CLI and runner, with a stand-in ``flwr``
executable (Flower's SuperLink is too heavy for a fast test; the e2e tests cover it): its ``run`` prints
what ``flwr run`` prints and runs the app in process, its ``stop`` records the run it was asked to stop.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fedforget.inprocess import run_in_process
from fedforget.server_app import StoreLockRefused
from fedforget.store import Store
from fedforget.unlearning.forget import forget_request

from .helpers import copy_store, train_in_process

NODES = 3
FEDSGT = {"method": "fedsgt", "chains.groups": 2, "chains.budget": 2, "slices-per-client": 1, "local-epochs": 1,
          "train-size": 300, "test-size": 100}
REPO = Path(__file__).resolve().parents[2]
RUN_ID = 7
FEDERATION = "fake-federation"

FAKE_FLWR = """#!{python}
import os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_FLWR_CALLS"], "a") as calls:
    calls.write(" ".join(args[:3] if args[0] == "stop" else ["run", str(os.getpid())]) + "\\n")
if args[0] == "stop":
    sys.exit(0)
print("Successfully started run {run_id}", flush=True)
if os.environ.get("FAKE_FLWR_HANG"):
    time.sleep(300)
from flwr.common.config import flatten_dict, parse_config_args
from fedforget.inprocess import run_in_process
run_in_process(flatten_dict(parse_config_args([args[args.index("--run-config") + 1]])), {nodes})
"""

#: The real ``fedforget`` entry point with Flower's CLI replaced by the stand-in (argv[1]).
CLI_WITH_FAKE_FLWR = ("import sys\nfrom fedforget.unlearning import flwr_runner\nfake = sys.argv.pop(1)\n"
                      "flwr_runner.flwr_cli = lambda: fake\nfrom fedforget.unlearning.cli import main\n"
                      "main(sys.argv[1:])")

HOLDER = ("import sys, time\nfrom fedforget.store.lock import store_run_lock\n"
          "with store_run_lock(sys.argv[1], 'retrain'):\n    print('held', flush=True)\n    time.sleep(300)")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_in_process(tmp_path_factory.mktemp("lock") / "store", NODES, **FEDSGT).root


@pytest.fixture
def store(trained, tmp_path) -> Store:
    """A private copy of the trained store with one forget request, so a retrain has work to do."""
    copy = copy_store(trained, tmp_path)
    forget_request(copy, samples=[copy.manifest()["partitions"]["1"][0][0]])
    return copy


@pytest.fixture
def fake_flwr(tmp_path) -> Path:
    path = tmp_path / "flwr"
    path.write_text(FAKE_FLWR.format(python=sys.executable, run_id=RUN_ID, nodes=NODES), encoding="utf-8")
    path.chmod(0o755)
    return path


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """The CLI's environment: this checkout's code, an empty FLWR_HOME (no local SuperLink is started)."""
    (tmp_path / "flwr-home").mkdir()
    return {**os.environ, "PYTHONPATH": str(REPO), "FLWR_HOME": str(tmp_path / "flwr-home"),
            "FAKE_FLWR_CALLS": str(tmp_path / "flwr-calls"), "COLUMNS": "200"}


@pytest.fixture
def holder(store):  # noqa: ANN201
    """Another live process holding the store's run lock (as an orphaned ServerApp would)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(store.root)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    proc.kill()
    proc.wait()


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` → the sha256 of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def cli(fake: Path, env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI_WITH_FAKE_FLWR, str(fake), *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def calls(env: dict[str, str]) -> list[str]:
    path = Path(env["FAKE_FLWR_CALLS"])
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def test_retrain_refuses_in_one_line_while_another_live_process_holds_the_lock_and_changes_nothing(
        store, holder, fake_flwr, env):
    before = snapshot(store.root)
    proc = cli(fake_flwr, env, "retrain", "--store", str(store.root), "--federation", FEDERATION, "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    line = one_line(proc.stderr)
    assert "is busy" in line and f"pid {holder.pid}" in line and "nothing was changed" in line
    assert calls(env) == []  # no Flower run was submitted
    assert snapshot(store.root) == before


def test_forget_propagate_refuses_before_applying_the_request_while_the_lock_is_held(
        store, holder, fake_flwr, env):
    before = snapshot(store.root)
    sample = store.manifest()["partitions"]["2"][0][0]
    proc = cli(fake_flwr, env, "forget", "--store", str(store.root), "--sample", str(sample), "--propagate",
               "--federation", FEDERATION)
    assert proc.returncode == 2 and "is busy" in one_line(proc.stderr)
    assert calls(env) == [] and snapshot(store.root) == before  # the request was not recorded


def test_a_server_app_run_is_refused_while_the_lock_is_held_and_runs_once_the_holder_is_sigkilled(store, holder):
    config = {**store.manifest()["config"], "store": str(store.root), "action": "retrain"}
    before = snapshot(store.root)
    with pytest.raises(StoreLockRefused, match="is busy"):
        run_in_process(config, NODES)
    assert snapshot(store.root) == before
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    run_in_process(config, NODES)  # the kernel released the dead holder's lock: no stale lock to clear
    ledger = store.ledger()
    try:
        assert ledger.retrained_watermark() == ledger.last_request() == 1
    finally:
        ledger.close()


def test_retrain_json_prints_only_the_json_on_stdout(store, fake_flwr, env):
    proc = cli(fake_flwr, env, "retrain", "--store", str(store.root), "--federation", FEDERATION, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)  # the `$ flwr run` line and the progress went to stderr
    assert summary["retrained_up_to_request"] == 1 and summary["available"]
    assert "$ " in proc.stderr and "flwr" in proc.stderr
    assert calls(env)[0].startswith("run ")


def test_forget_propagate_json_prints_only_the_json_on_stdout(store, fake_flwr, env):
    sample = store.manifest()["partitions"]["2"][0][0]
    proc = cli(fake_flwr, env, "forget", "--store", str(store.root), "--sample", str(sample), "--propagate",
               "--federation", FEDERATION, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["request"] == 2 and data["propagation"]["flwr_exit_code"] == 0
    assert data["propagation"]["acknowledgements"]["2"]["acknowledged"] == [2]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_killing_retrain_stops_the_flower_run_it_started_and_its_flwr_run_child(store, fake_flwr, env, signum):
    env = {**env, "FAKE_FLWR_HANG": "1"}
    proc = subprocess.Popen([sys.executable, "-c", CLI_WITH_FAKE_FLWR, str(fake_flwr), "retrain", "--store",
                             str(store.root), "--federation", FEDERATION], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = store.root / "flwr-run.log"
    deadline = time.monotonic() + 120
    while f"started run {RUN_ID}" not in (log.read_text() if log.exists() else ""):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    child = int(calls(env)[0].split()[1])
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 128 + signum
    assert f"stopped Flower run {RUN_ID}" in one_line(stderr)
    assert calls(env)[1] == f"stop {RUN_ID} {FEDERATION}"
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
