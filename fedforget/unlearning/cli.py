"""The ``fedforget`` command line (typer + rich)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from fedforget.store import Store, StoreError
from fedforget.store.ledger import LedgerUsageError
from fedforget.store.store import resolve_store_path
from fedforget.unlearning.errors import fail
from fedforget.unlearning.flwr_runner import flwr_run
from fedforget.unlearning.status import print_status, store_status

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Federated fine-tuning that can forget: train, forget, serve, retrain, verify.")
theory_app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                         help="Deletion-rate theory and sequence selection, next to a Monte-Carlo run.")
app.add_typer(theory_app, name="theory")
console = Console()

FederationOpt = Annotated[str, typer.Option(help="SuperLink connection in $FLWR_HOME/config.toml.",
                                            envvar="FEDFORGET_FEDERATION")]
RunConfigOpt = Annotated[str, typer.Option("--run-config", help="Flower run config, e.g. \"task='digits-mlp'\".")]
StoreOpt = Annotated[str, typer.Option("--store", help="Store directory of a run (store= in the run config).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def open_store(path: str) -> Store:
    try:
        return Store.open(path)
    except StoreError as exc:
        fail(str(exc))


def emit(data: dict, as_json: bool) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


@app.command()
def status(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """Serving plan, sequences and active prefixes, δ left, requests, artifacts with validity and sha256."""
    handle = open_store(store)
    try:
        info = store_status(handle)
    except (StoreError, LedgerUsageError) as exc:
        fail(str(exc))
    if as_json:
        emit(info, True)
    else:
        print_status(info, console)


@app.command()
def forget(
    store: StoreOpt,
    sample: Annotated[list[int] | None, typer.Option("--sample", help="Sample id (index in the train split).")] = None,
    slice_: Annotated[list[str] | None, typer.Option("--slice", help="A client's slice, PARTITION:SLICE.")] = None,
    client: Annotated[list[int] | None, typer.Option("--client", help="A whole client (partition id).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Forget samples, slices or clients now: invalidate what saw them and re-plan serving (no training)."""
    from fedforget.unlearning.forget import forget_request

    handle = open_store(store)
    try:
        result = forget_request(handle, sample or [], slice_ or [], client or [])
    except (LedgerUsageError, StoreError) as exc:
        fail(str(exc))
    data = result.to_json()
    if as_json:
        emit(data, True)
        return
    if result.request is None:
        console.print("already forgotten: nothing changed (no request recorded)")
        return
    serving = result.serving
    console.print(f"request [bold]#{result.request}[/]: forgot {result.new_samples} sample(s) in unit(s) "
                  f"{', '.join(result.units)}; invalidated {len(result.invalidated)} artifact(s) "
                  f"in {result.latency_ms:.1f} ms")
    if serving.get("available"):
        left = serving.get("deletions-left")
        console.print(f"serving {len(serving['artifacts'])} artifact(s) · expected deletions left "
                      f"{'—' if left is None else f'{left:.2f}'} · clients drop the data at the next "
                      "`fedforget retrain`")
    else:
        console.print("[bold red]retrain required[/]: no valid model is left to serve; run `fedforget retrain`")


@app.command()
def evaluate(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """Test accuracy of exactly what is served now."""
    from fedforget.strategies.serve import ServingError
    from fedforget.unlearning.evaluate import evaluate_store

    handle = open_store(store)
    try:
        result = evaluate_store(handle)
    except ServingError as exc:
        fail(str(exc), code=1)
    except (StoreError, LedgerUsageError) as exc:
        fail(str(exc))
    if as_json:
        emit(result, True)
    else:
        console.print(f"served accuracy [bold]{result['accuracy']:.4f}[/] (loss {result['loss']:.4f}, "
                      f"{result['num-examples']} test examples, {len(result['serving'])} artifact(s))")


@app.command()
def retrain(store: StoreOpt, federation: FederationOpt = "local-simulation", as_json: JsonOpt = False) -> None:
    """A Flower run: clients delete forgotten samples for good, then only invalid artifacts are rebuilt."""
    from fedforget.unlearning.retrain import retrain_store

    handle = open_store(store)
    try:
        code, log_path, target = retrain_store(handle, federation, console)
        info = store_status(handle, accuracy=False)
        ledger = handle.ledger()
        try:
            reached = ledger.retrained_watermark()
        finally:
            ledger.close()
    except (StoreError, LedgerUsageError) as exc:
        fail(str(exc))
    if code != 0 or reached < target:
        fail(f"the retrain run did not finish (flwr exit code {code}); nothing half-done was served; its log is "
             f"{log_path}; run `fedforget retrain` again", code=1)
    summary = {"retrained_up_to_request": reached, "serving": info["serving"], "accuracy": info["accuracy"],
               "available": info["available"], "log": str(log_path)}
    if as_json:
        emit(summary, True)
    else:
        acc = "—" if info["accuracy"] is None else f"{info['accuracy']:.4f}"
        console.print(f"[bold green]retrained[/] up to request #{reached}; serving {len(info['serving'])} "
                      f"artifact(s), accuracy {acc}")


@app.command()
def verify(
    store: StoreOpt,
    include_all: Annotated[bool, typer.Option("--all", help="Also compare artifacts that are not served.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Retrain from scratch (in process) on the data minus everything forgotten; compare bit for bit."""
    from fedforget.unlearning.verify import verify_store

    handle = open_store(store)
    try:
        with console.status("training from scratch on the remaining data…"):
            result = verify_store(handle, include_all=include_all)
    except (StoreError, LedgerUsageError) as exc:
        fail(str(exc))
    if as_json:
        emit(result, True)
    else:
        for c in result["compared"]:
            mark = "[green]equal[/]" if c["equal"] else "[red]DIFFERENT[/]"
            console.print(f" {'●' if c['served'] else ' '} {c['artifact']}: {mark}")
        verdict = "[bold green]exact[/]" if result["exact"] else "[bold red]NOT exact[/]"
        console.print(f"{verdict}: {result['served_equal']}/{result['served']} served artifacts bit-identical to "
                      f"from-scratch training without {result['forgotten_samples']} forgotten sample(s)"
                      + (f" ({result['reason']})" if result["reason"] else ""))
    if not result["exact"]:
        raise SystemExit(1)


@app.command()
def audit(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """Membership inference on forgotten vs held-out samples, before and after forgetting (AUC)."""
    from fedforget.unlearning.audit import audit_store

    handle = open_store(store)
    try:
        result = audit_store(handle)
    except (StoreError, LedgerUsageError) as exc:
        fail(str(exc))
    if as_json:
        emit(result, True)
        return
    for name in ("before", "after"):
        r = result[name]
        if r is None:
            console.print(f"{name}: nothing served")
            continue
        console.print(f"{name:>6}: loss-threshold AUC {r['loss_threshold_auc']:.3f} · shadow-model AUC "
                      f"{r['shadow_auc']:.3f} ({result['forgotten']} forgotten vs {result['held_out']} held-out)")


@app.command()
def fairness(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """FedShard's efficiency fairness M_e (cost spread over clients) and performance fairness M_p."""
    from fedforget.unlearning.errors import UsageError
    from fedforget.unlearning.fairness import fairness_of_store

    handle = open_store(store)
    try:
        report = fairness_of_store(handle)
    except (UsageError, StoreError, LedgerUsageError) as exc:
        fail(str(exc))
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


@theory_app.command("deletion-rate")
def theory_deletion_rate(
    method: Annotated[str, typer.Option(help="fedsgt, s3t, sisa or fedcio.")] = "fedsgt",
    groups: Annotated[int, typer.Option(help="L: groups (slices per shard).")] = 10,
    budget: Annotated[int, typer.Option(help="B: sequences per shard.")] = 10,
    shards: Annotated[int, typer.Option(help="m: shards (s3t, sisa).")] = 1,
    clusters: Annotated[int, typer.Option(help="c: clusters (fedcio).")] = 5,
    trials: Annotated[int, typer.Option(help="Monte-Carlo trials.")] = 20000,
    seed: Annotated[int, typer.Option(help="Monte-Carlo seed.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Expected requests until a full retrain: closed form next to a Monte-Carlo run of the same model."""
    from fedforget.core.theory import deletion_rate_report

    try:
        report = deletion_rate_report(method, groups, budget, shards=shards, clusters=clusters, trials=trials,
                                      seed=seed)
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        emit(report, True)
    else:
        console.print(f"{method}: closed form δ = {report['closed_form']:.3f}, Monte Carlo {report['monte_carlo']:.3f}"
                      f" ± {report['stderr']:.3f} ({trials} trials)")


@theory_app.command("sequences")
def theory_sequences(
    groups: Annotated[int, typer.Option(help="L: groups.")] = 10,
    budget: Annotated[int, typer.Option(help="B: sequences.")] = 10,
    prior: Annotated[str, typer.Option(help="Deletion prior per group, e.g. 0.4,0.3,0.2,0.1 (BMS).")] = "",
    t: Annotated[int, typer.Option(help="BMS look-ahead t.")] = 100,
    seed: Annotated[int, typer.Option(help="Seed for B > L conditional samples.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """The group orders trained: cyclic rotations (S3T tree for B > L), or BMS for a non-uniform prior."""
    from fedforget.core.config import ConfigError, parse_prior
    from fedforget.core.sequences import select_sequences

    try:
        weights = parse_prior(prior, groups) if prior else None
        sequences = select_sequences(groups, budget, weights, t=t, seed=seed)
    except (ConfigError, ValueError) as exc:
        fail(str(exc).replace("run-config 'prior'", "--prior"))
    data = {"groups": groups, "budget": budget, "prior": weights, "selector": "bms" if weights else "cyclic",
            "sequences": [list(s) for s in sequences]}
    if as_json:
        emit(data, True)
    else:
        for s in sequences:
            console.print(" ".join(map(str, s)))


@app.command()
def run(
    store: StoreOpt = "runs/latest",
    federation: FederationOpt = "local-simulation",
    run_config: RunConfigOpt = "",
) -> None:
    """Train through `flwr run` with a progress bar, then print where the store is."""
    if "store=" in run_config.replace(" ", ""):
        fail("pass the store with --store, not inside --run-config")
    from fedforget.unlearning.run_config import check_run_config

    try:
        check_run_config(run_config)
    except ValueError as exc:
        fail(str(exc))
    existing = resolve_store_path(store)
    if (existing / "ledger.sqlite").is_file():
        ledger = Store(existing).ledger()
        try:
            if ledger.has_requests():
                fail(f"{existing} holds forget requests; pick a new --store (or `fedforget retrain` this one)")
        finally:
            ledger.close()
    code, log_path = flwr_run(federation, run_config, store, console)
    try:
        info = store_status(Store.open(store))
    except StoreError:
        info = None
    if code != 0 or info is None or not info["serving"]:
        fail(f"the Flower run did not finish (flwr exit code {code}); its log is {log_path}", code=1)
    console.print(f"[bold green]done[/]: accuracy {info['accuracy']:.4f}; store written to [bold]{info['store']}[/]")


def main(argv: list[str] | None = None) -> None:
    """The ``fedforget`` entry point: a usage error is one line on stderr and exit code 2 (no usage
    box, no traceback), like every other error the user must fix."""
    import click

    try:
        code = app(args=argv, prog_name="fedforget", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx else "fedforget --help")
        raise SystemExit(2) from None
    except click.ClickException as exc:
        where = f" (see `{exc.ctx.command_path} --help`)" if getattr(exc, "ctx", None) else ""
        fail(" ".join(exc.format_message().split()) + where, code=2)
    except click.exceptions.Abort:
        fail("aborted", code=130)
    raise SystemExit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
