"""``fedforget fairness``: FedShard's fairness measures of a store, as a command."""

from __future__ import annotations

import sqlite3

import typer

from fedforget.store import StoreError
from fedforget.store.check import corrupt_ledger
from fedforget.store.ledger import LedgerUsageError
from fedforget.unlearning.cli_support import JsonOpt, StoreOpt, console, emit, open_store
from fedforget.unlearning.errors import BROKEN_STORE_EXIT, fail


def add_commands(app: typer.Typer) -> None:
    app.command()(fairness)


def fairness(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """FedShard's efficiency fairness M_e (cost spread over clients) and performance fairness M_p."""
    from fedforget.methods.fedshard.fairness import fairness_of_store
    from fedforget.unlearning.errors import UsageError

    handle = open_store(store)
    try:
        report = fairness_of_store(handle)
    except (UsageError, StoreError, LedgerUsageError) as exc:
        fail(str(exc))
    except sqlite3.DatabaseError as exc:  # a page of the sample index (not checked up front)
        fail(corrupt_ledger(exc), code=BROKEN_STORE_EXIT)
    if as_json:
        emit(report, True)
        return
    console.print(f"fedshard: {report['clients']} clients, {report['stages']} stages, training "
                  f"{report['training-client-rounds']} client-rounds; leavers {report['leavers'] or 'none'}")
    console.print(f"unlearning cost Z_c per client (client-rounds): min {report['cost-min']} · mean "
                  f"{report['cost-mean']:.1f} · max {report['cost-max']}")
    console.print(f"M_e {report['me-client-rounds']:.3f} (client-rounds²/rad) · {report['me-relative']:.3f} "
                  "(relative cost, unit-free) — lower is fairer")
    mp = report.get("mp")
    console.print(f"M_p {'—' if mp is None else f'{mp:.3f}'} (ε = {report['epsilon']}; ≥ 4, lower is fairer)"
                  + (f" — {report['mp-note']}" if mp is None else ""))
    for r in report["requests"]:
        console.print(f"  retrain up to request #{r['watermark']}: {r['rebuilt']} shard(s), "
                      f"{r['client-rounds']} client-rounds")
