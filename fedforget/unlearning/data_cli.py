"""``fedforget data``: nodes' own data directories (see docs/operations/data.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from fedforget.cli_kit.errors import BROKEN_STORE_EXIT, fail
from fedforget.cli_kit.support import JsonOpt, console, emit, from_cwd

data_app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                       help="Nodes' own data directories: write a shipped task's rows as node data.")

#: Most nodes one split writes (each gets a directory).
MAX_NODES = 10_000


@data_app.command()
def split(
    task: Annotated[str, typer.Option("--task", help="The shipped task whose rows to split (e.g. digits-mlp).")],
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=MAX_NODES, help="How many nodes (partitions).")],
    out: Annotated[str, typer.Option("--out", help="A new (or empty) directory to write into.")],
    partitioner: Annotated[str, typer.Option("--partitioner", help="iid or dirichlet, as the run config's.")]
    = "dirichlet",
    alpha: Annotated[float, typer.Option("--alpha", help="Dirichlet concentration (run config dirichlet-alpha).")]
    = 0.5,
    seed: Annotated[int, typer.Option("--seed", help="The run seed the partition plan is drawn with.")] = 1,
    train_size: Annotated[int, typer.Option("--train-size", help="Rows of the train pool (0 = the task's).")] = 0,
    test_size: Annotated[int, typer.Option("--test-size", help="Rows of the test split (0 = the task's).")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """A shipped task's partitions as nodes' data (OUT/node-<p>/train.parquet), its test split in OUT/server."""
    from fedforget.core.config import parse_run_config
    from fedforget.inprocess import default_run_config
    from fedforget.tasks.assets import AssetMissing
    from fedforget.tasks.node_split import SplitMismatch, write_split

    keys = {"task": task, "partitioner": partitioner, "dirichlet-alpha": alpha, "seed": seed,
            "train-size": train_size, "test-size": test_size}
    try:
        cfg = parse_run_config({**default_run_config(), **keys}, warn=False)
        written = write_split(cfg, nodes, Path(from_cwd(out)))
    except SplitMismatch as exc:
        fail(str(exc), BROKEN_STORE_EXIT)
    except (ValueError, AssetMissing, FileExistsError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename or out}: {exc.strerror or exc}; pick a directory this user can write")
    info = {"out": str(written.out), "task": task, "nodes": {name: {"dir": str(written.out / name),
                                                                    "records": count}
                                                             for name, count in written.nodes.items()},
            "server": {"dir": str(written.out / "server"), "test_records": written.test_records}}
    if as_json:
        emit(info, True)
        return
    for name, count in written.nodes.items():
        console.print(f"wrote {escape(str(written.out / name / 'train.parquet'))}: {count} records", highlight=False,
                      soft_wrap=True)
    test_file = escape(str(written.out / "server" / "test.parquet"))
    console.print(f"wrote {test_file}: {written.test_records} records (the test split)", highlight=False,
                  soft_wrap=True)
    console.print(f"[dim]node p reads them with the node config data-dir='{escape(str(written.out))}/node-<p>'[/]",
                  highlight=False, soft_wrap=True)
