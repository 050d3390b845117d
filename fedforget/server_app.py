"""The ServerApp: read the run config, pick the method, run it on the Grid."""

from __future__ import annotations

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedforget.core.config import parse_run_config
from fedforget.strategies.registry import get_method

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = parse_run_config(dict(context.run_config))
    get_method(cfg.method)(grid, cfg)
