"""`fedforget run` runs the Flower app in the current directory (or the one given) and says which; a user app's
relative paths are its directory's, passed absolute; a run the ServerApp refused exits 1 with the refusal's line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedforget.core.config import ConfigError
from fedforget.unlearning.run_app import plan_run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tabular-mlp"
REFUSAL = "fedforget: run refused: run-config 'test-data' is '/x', but /x is not a directory"

#: What `flwr run --stream` prints for a run its ServerApp refused (and exits 0, as Flower does); the
#: arguments it was given go to $FAKE_FLWR_ARGS.
FAKE_FLWR = f"""#!{sys.executable}
import json, os, sys
json.dump({{"argv": sys.argv[1:], "cwd": os.getcwd(), "home": os.environ.get("FEDFORGET_HOME")}},
          open(os.environ["FAKE_FLWR_ARGS"], "w"))
print("Successfully started run 7", flush=True)
print("INFO :      Starting FedAvgLoRA strategy (train):")
print("ERROR :     {REFUSAL}")
"""
CLI_WITH_FAKE_FLWR = ("import sys\nfrom fedforget.unlearning import flwr_runner\nfake = sys.argv.pop(1)\n"
                      "flwr_runner.flwr_cli = lambda: fake\nfrom fedforget.unlearning.cli import main\n"
                      "main(sys.argv[1:])")


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """A user's copy of the example app, outside the checkout."""
    return Path(shutil.copytree(EXAMPLE, tmp_path / "userapp", ignore=shutil.ignore_patterns("runs", "__pycache__")))


def test_the_app_in_the_current_directory_is_run_with_its_paths_made_absolute(app, monkeypatch):
    monkeypatch.setenv("FEDFORGET_HOME", str(app))  # what the app's env.sh sets: still the app, not fedforget's
    planned = plan_run(None, "", "fake", "num-rounds=1 test-data='data/server'", app)
    assert (planned.app.folder, planned.app.name, planned.app.own) == (app, "example/tabular-mlp", False)
    assert planned.store == str(app / "runs" / "tabular-mlp")  # the app's declared store, from its directory
    assert f'test-data="{app / "data" / "server"}"' in planned.run_config and "num-rounds=1" in planned.run_config
    assert "the Flower app example/tabular-mlp 1.0.0 in" in planned.app.describe()
    given = plan_run(str(app), "elsewhere", "fake", "", app.parent)  # APP given; --store from the shell's cwd
    assert given.app.folder == app and given.store == str(app.parent / "elsewhere")


def test_outside_any_app_fedforget_runs_its_own_and_says_so(tmp_path):
    planned = plan_run(None, "", "fake", "", tmp_path)
    assert planned.app.own and planned.store == str(tmp_path / "runs" / "latest")
    assert planned.app.describe().startswith("fedforget's own app fedforget/fedforget")


def test_a_directory_that_is_no_app_and_an_undeclared_key_are_refused_in_one_line(app, tmp_path):
    with pytest.raises(ConfigError, match="is not a Flower app"):
        plan_run(str(tmp_path), "", "fake", "", tmp_path)
    with pytest.raises(ConfigError, match=r"'chains.groups' is not declared in \[tool.flwr.app.config\] of "):
        plan_run(None, "", "fake", "chains.groups=2", app)


def test_a_refused_run_exits_1_with_the_refusal_line_and_the_app_it_ran(app, tmp_path):
    fake = tmp_path / "flwr"
    fake.write_text(FAKE_FLWR, encoding="utf-8")
    fake.chmod(0o755)
    (tmp_path / "flwr-home").mkdir()
    env = {**{k: v for k, v in os.environ.items() if k != "FEDFORGET_HOME"}, "PYTHONPATH": str(REPO),
           "FLWR_HOME": str(tmp_path / "flwr-home"), "FAKE_FLWR_ARGS": str(tmp_path / "args.json"), "COLUMNS": "300"}
    proc = subprocess.run([sys.executable, "-c", CLI_WITH_FAKE_FLWR, str(fake), "run", "--federation", "fake",
                           "--run-config", "num-rounds=1"], env=env, cwd=app, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"fedforget: error: {REFUSAL.removeprefix('fedforget: ')}; its log is {app / 'runs' / 'tabular-mlp'}"
        "/flwr-run.log"]
    assert f"running the Flower app example/tabular-mlp 1.0.0 in {app}" in proc.stdout
    submitted = json.loads((tmp_path / "args.json").read_text())
    assert submitted["argv"][:3] == ["run", str(app), "fake"] and submitted["home"] == str(app)


FAKE_SUPERLINK = f"""#!{sys.executable}
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.mark.parametrize("home_holds", ["fedforget's checkout", "the app"])
def test_a_running_local_superlink_with_another_home_is_refused_before_flower_starts(app, tmp_path, home_holds):
    """A managed local SuperLink already up with fedforget's checkout as its FEDFORGET_HOME would refuse the app's
    relative simulation_data after a minute of Ray start-up: `fedforget run` says so first, in one line."""
    from fedforget.launch import free_port
    from fedforget.local_superlink import healthy
    from fedforget.process_tree import kill_tree
    from fedforget.unlearning.run_app import check_local_superlink

    flwr_home = tmp_path / "flwr-home"
    flwr_home.mkdir()
    (flwr_home / "config.toml").write_text('[superlink]\ndefault = "local"\n[superlink.local]\naddress = ":local:"\n')
    script = tmp_path / "bin" / "flower-superlink"
    script.parent.mkdir()
    script.write_text(FAKE_SUPERLINK, encoding="utf-8")
    script.chmod(0o755)
    port = free_port()
    home = REPO if home_holds == "fedforget's checkout" else app
    proc = subprocess.Popen([str(script), "--port", str(port)], env={**os.environ, "FEDFORGET_HOME": str(home)})
    try:
        for _ in range(100):
            if healthy(port):
                break
            time.sleep(0.1)
        env = {"FLWR_HOME": str(flwr_home), "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(port)}
        planned = plan_run(None, "", "local", "", app)
        if home_holds == "the app":
            check_local_superlink(planned, env)
            return
        with pytest.raises(ConfigError, match=rf"127.0.0.1:{port}\) runs with {REPO} as its home, not {app}"):
            check_local_superlink(planned, env)
    finally:
        kill_tree(proc.pid)
