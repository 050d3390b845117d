"""The replay page's ServerApp, with the ``[tool.flwr.app.config]`` it shows, trains as shown (the run config's
``store`` is the run's, whatever the code built the strategy with), and its subclass example is accepted."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from flwr.common.config import flatten_dict

from fedforget.inprocess import run_in_process
from fedforget.store import Store

from ...helpers import served_ids

PAGE = Path(__file__).resolve().parents[4] / "docs" / "methods" / "replay.md"


def block(starts: str) -> str:
    found = [b for b in re.findall(r"```[a-z]*\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
             if b.startswith(starts)]
    assert len(found) == 1, f"{PAGE.name} shows no block starting {starts!r}"
    return found[0]


def test_the_pages_server_app_trains_with_the_run_config_it_shows(tmp_path):
    names: dict[str, object] = {"__name__": "server_app"}
    exec(compile(block("# my_app/server_app.py"), "server_app.py", "exec"), names)  # noqa: S102
    config = flatten_dict(tomllib.loads(block("[tool.flwr.app.config]"))["tool"]["flwr"]["app"]["config"])
    run_in_process({**config, "store": str(tmp_path / "p")}, 3, server_app=names["app"])
    store = Store.open(tmp_path / "p")
    assert store.manifest()["config"]["replay.strategy"] == "fedprox"
    assert served_ids(store) == [f"replay/round-{store.manifest()['config']['num-rounds']}"]


def test_the_pages_subclass_is_what_runs():
    names: dict[str, object] = {"__name__": "clipped"}
    exec(compile(block("import numpy as np"), "clipped.py", "exec"), names)  # noqa: S102
    strategy = names["strategy"]
    assert type(strategy.flower_strategy()).__name__ == "ClippedFedAvg"
    assert strategy.config.fraction_train == 0.3
