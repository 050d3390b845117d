"""``fedforget fairness``: FedShard's fairness measures of a store, as a command."""

from __future__ import annotations

import typer

from fedforget.cli_kit.support import JsonOpt, StoreOpt, console, emit, open_store, store_errors


def add_commands(app: typer.Typer) -> None:
    app.command()(fairness)


def fairness(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """FedShard's efficiency fairness M_e (cost spread over clients) and performance fairness M_p."""
    from fedforget.cli_kit.errors import UsageError
    from fedforget.methods.fedshard.fairness import fairness_of_store

    handle = open_store(store)
    with store_errors(UsageError):
        report = fairness_of_store(handle)
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
