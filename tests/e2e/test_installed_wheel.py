"""An installed copy works with no source checkout beside it: the built wheel, installed into a fresh
venv outside the checkout, trains through `fedforget run` on Ray, forgets one sample and verifies that
what it serves equals a from-scratch run, with the same bytes as the checkout's in-process run.

The fresh venv gets fedforget and flwr (its console scripts, which Flower's runtime starts) as real
installs; the rest of the pinned stack is read from this checkout's venv through a path entry, so the
test needs no network. A path entry does not run that venv's own ``.pth`` files, so the checkout's
editable install of fedforget stays invisible, which the test checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from fedforget.launch import simulation_federation

from ..integration.helpers import served_sha, train_in_process

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
NODES = 3
CONFIG = {"task": "digits-mlp", "method": "fedsgt", "chains.groups": 2, "chains.budget": 2, "slices-per-client": 1,
          "chains.rounds-per-phase": 1,  # one round per chain position: a message per node, not three
          "lr": 0.02, "local-epochs": 1, "seed": 3}


def _run(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv outside the checkout holding the wheel built from it; returns the venv's bin folder."""
    work = tmp_path_factory.mktemp("installed")
    assert not work.resolve().is_relative_to(ROOT)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work / "dist"),
          str(ROOT)], timeout=300)
    wheel = next((work / "dist").glob("fedforget-*.whl"))
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     timeout=60).stdout.strip())
    flwr_wheels = work / "flwr"
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(flwr_wheels), "flwr==1.42.0"],
         timeout=300)
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
          "--find-links", str(flwr_wheels), "flwr==1.42.0", str(wheel)], timeout=300)
    # only now the rest of the stack: pip above must not find flwr already there
    here = sysconfig.get_paths()["purelib"]
    (site / "00-pinned-stack.pth").write_text(f"{here}\n", encoding="utf-8")
    torchvision_hook = Path(here) / "zz_tv_cpu_compat.pth"
    if torchvision_hook.is_file():
        (site / torchvision_hook.name).write_text(torchvision_hook.read_text(encoding="utf-8"), encoding="utf-8")
    return venv / "bin"


def _env(bin_dir: Path, base: dict[str, str], cache: Path) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in ("FEDFORGET_HOME", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update({"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "FEDFORGET_CACHE": str(cache),
                "COLUMNS": "200"})
    return env


def test_the_installed_wheel_trains_forgets_and_verifies_outside_the_checkout(installed, tmp_path):
    reference = served_sha(train_in_process(tmp_path / "inproc", NODES, **CONFIG))
    work = tmp_path / "elsewhere"
    work.mkdir()
    with simulation_federation(tmp_path / "flwr-home", NODES) as fed:
        env = _env(installed, fed.env, tmp_path / "cache")
        where = _run([str(installed / "python"), "-c", "import fedforget; print(fedforget.__file__)"],
                     timeout=120, env=env, cwd=work).stdout.strip()
        assert Path(where).is_relative_to(installed.parent) and not Path(where).is_relative_to(ROOT)
        config = " ".join(f"{k}={json.dumps(v)}" for k, v in CONFIG.items())
        run = _run([str(installed / "fedforget"), "run", "--federation", fed.connection, "--store", "store",
                    "--run-config", config], timeout=900, env=env, cwd=work)
        assert "store written to" in run.stdout, run.stdout[-3000:]
    store = work / "store"
    from fedforget.store import Store

    assert served_sha(Store.open(store)) == reference  # the installed copy built the checkout's bytes
    sample = json.loads((store / "manifest.json").read_text())["partitions"]["1"][0][0]
    forgot = json.loads(_run([str(installed / "fedforget"), "forget", "--store", "store", "--sample", str(sample),
                              "--json"], timeout=300, env=env, cwd=work).stdout)
    assert forgot["invalidated"]
    verdict = json.loads(_run([str(installed / "fedforget"), "verify", "--store", "store", "--json"], timeout=900,
                              env=env, cwd=work).stdout)
    assert verdict["exact"] and verdict["served"] == verdict["served_equal"] > 0
    status = _run([str(installed / "fedforget"), "status", "--store", "store", "--json"], timeout=300, env=env,
                  cwd=work)
    assert json.loads(status.stdout)["available"]
