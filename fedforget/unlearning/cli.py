"""The ``fedforget`` command line (typer + rich)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from fedforget.store import Store, StoreError
from fedforget.unlearning.errors import fail
from fedforget.unlearning.flwr_runner import flwr_run
from fedforget.unlearning.status import print_status, store_status

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Federated fine-tuning that can forget: run, inspect and (soon) unlearn.")
console = Console()

FederationOpt = Annotated[str, typer.Option(help="SuperLink connection in $FLWR_HOME/config.toml.")]
RunConfigOpt = Annotated[str, typer.Option("--run-config", help="Flower run config, e.g. \"task='digits-mlp'\".")]
StoreOpt = Annotated[str, typer.Option("--store", help="Store directory of a run (store= in the run config).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def open_store(path: str) -> Store:
    try:
        return Store.open(path)
    except StoreError as exc:
        fail(str(exc))


@app.command()
def status(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """Task, method, config, rounds done, last accuracy, and the artifacts with their sha256."""
    handle = open_store(store)
    try:
        info = store_status(handle)
    except StoreError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        print_status(info, console)


@app.command()
def run(
    store: StoreOpt = "runs/latest",
    federation: FederationOpt = "local-simulation",
    run_config: RunConfigOpt = "",
) -> None:
    """Train through `flwr run` with a progress bar, then print where the store is."""
    if "store=" in run_config.replace(" ", ""):
        fail("pass the store with --store, not inside --run-config")
    code, log_path = flwr_run(federation, run_config, store, console)
    try:
        info = store_status(Store.open(store))
    except StoreError:
        info = None
    if code != 0 or info is None or not info["serving"]:
        fail(f"the Flower run did not finish (flwr exit code {code}); its log is {log_path}", code=1)
    console.print(f"[bold green]done[/]: accuracy {info['accuracy']:.4f}; store written to [bold]{info['store']}[/]")


def main() -> None:
    app()
