"""The ServerApp: read the run config, pick the method, run it on the Grid."""

from __future__ import annotations

from logging import ERROR

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from fedforget.core.config import ConfigError, parse_run_config
from fedforget.strategies.messaging import ReliableGrid
from fedforget.strategies.registry import get_method

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    try:
        cfg = parse_run_config(dict(context.run_config))
    except ConfigError as exc:
        log(ERROR, "fedforget: bad run config: %s", exc)  # the one line a user needs, before Flower's traceback
        raise
    if cfg.action == "propagate":  # deletion on the clients now, no training (`forget --propagate`)
        from fedforget.strategies.propagate import run_propagation

        run_propagation(ReliableGrid(grid), cfg)
        return
    get_method(cfg.method)(ReliableGrid(grid), cfg)
