"""``fedforget theory``: the chains methods' deletion-rate theory and sequence selection, as commands."""

from __future__ import annotations

from typing import Annotated

import typer

from fedforget.cli_kit.errors import fail
from fedforget.cli_kit.support import JsonOpt, console, emit

theory_app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                         help="Deletion-rate theory and sequence selection, next to a Monte-Carlo run.")


def add_commands(app: typer.Typer) -> None:
    app.add_typer(theory_app, name="theory")


# Bounds of the theory commands' numbers (docs/cli.md, "Bounds"): beyond them, exit 2 with one line. The
# Monte-Carlo's work (methods.chains.theory.monte_carlo_work) costs ≤ ~1.2 µs a step on one loaded core.
MAX_GROUPS, MAX_BUDGET, MAX_SHARDS, MAX_CLUSTERS, MAX_TRIALS = 1000, 10_000, 1000, 100_000, 1_000_000
MAX_MC_WORK = 5_000_000
MAX_T = 1_000_000
SEED_MAX = 2**63 - 1


@theory_app.command("deletion-rate")
def theory_deletion_rate(
    method: Annotated[str, typer.Option(help="fedsgt, s3t, sisa or fedcio.")] = "fedsgt",
    groups: Annotated[int, typer.Option(help="L: groups (slices per shard).", min=1, max=MAX_GROUPS)] = 10,
    budget: Annotated[int, typer.Option(help="B: sequences per shard.", min=1, max=MAX_BUDGET)] = 10,
    shards: Annotated[int, typer.Option(help="m: shards (s3t, sisa).", min=1, max=MAX_SHARDS)] = 1,
    clusters: Annotated[int, typer.Option(help="c: clusters (fedcio).", min=1, max=MAX_CLUSTERS)] = 5,
    trials: Annotated[int, typer.Option(help="Monte-Carlo trials.", min=1, max=MAX_TRIALS)] = 20000,
    seed: Annotated[int, typer.Option(help="Monte-Carlo seed.", min=0, max=SEED_MAX)] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Expected requests until a full retrain: closed form next to a Monte-Carlo run of the same model."""
    from fedforget.methods.chains.theory import deletion_rate_report, monte_carlo_work

    try:
        work = monte_carlo_work(method, groups, shards, clusters, trials)
    except ValueError as exc:  # an unknown method
        fail(str(exc))
    if work > MAX_MC_WORK:
        fewer = int(trials * MAX_MC_WORK / work)
        fail(f"this Monte-Carlo run is over its bound ({work:.3g} steps > {MAX_MC_WORK:.3g}, about 6 s); "
             + (f"use --trials {fewer} or fewer" if fewer >= 1 else "use fewer --groups, --shards or --clusters"))
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
    groups: Annotated[int, typer.Option(help="L: groups.", min=1, max=MAX_GROUPS)] = 10,
    budget: Annotated[int, typer.Option(help="B: sequences.", min=1, max=MAX_BUDGET)] = 10,
    prior: Annotated[str, typer.Option(help="Deletion prior per group, e.g. 0.4,0.3,0.2,0.1 (BMS).")] = "",
    t: Annotated[int, typer.Option(help="BMS look-ahead t.", min=1, max=MAX_T)] = 100,
    seed: Annotated[int, typer.Option(help="Seed for B > L conditional samples.", min=0, max=SEED_MAX)] = 0,
    as_json: JsonOpt = False,
) -> None:
    """The group orders trained: cyclic rotations (S3T tree for B > L), or BMS for a non-uniform prior."""
    import sys

    from fedforget.core.config_keys import ConfigError
    from fedforget.methods.chains.config import parse_prior
    from fedforget.methods.chains.sequences import select_sequences
    from fedforget.methods.chains.theory import selection_refusal

    refusal = selection_refusal(groups, budget, bool(prior), ("--groups", "--budget"))
    if refusal:
        fail(refusal)
    try:
        weights = parse_prior(prior, groups) if prior else None
        sequences = select_sequences(groups, budget, weights, t=t, seed=seed)
    except (ConfigError, ValueError) as exc:
        fail(str(exc).replace("run-config 'chains.prior'", "--prior"))
    data = {"groups": groups, "budget": budget, "prior": weights, "selector": "bms" if weights else "cyclic",
            "sequences": [list(s) for s in sequences]}
    if as_json:
        emit(data, True)
    else:  # plain lines: rich's markup and wrapping cost minutes on a million numbers
        sys.stdout.write("".join(" ".join(map(str, s)) + "\n" for s in sequences))
