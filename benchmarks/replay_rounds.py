"""How much of a training a replay retrain runs again: the rounds from the first one whose drawn nodes held
the forgotten record, over every partition, for the draws ``method='replay'`` makes.

Pure planning (the same seeded draw as the server, ``replay.server.sampled``), so it covers
federations far larger than a CPU can train; that a retrain replays exactly these rounds and no others is
what ``tests/integration/methods/replay`` checks on real runs. Reported per (nodes, rounds, fraction-train):
the mean and worst fraction of rounds replayed when one partition's record is forgotten (1.0 = a retrain
from scratch, what ``fedavg`` always pays), and the share of partitions whose forget replays everything.

    python benchmarks/replay_rounds.py [--seeds 1,2,3]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bench_common import machine_info

from fedforget.core.config import sample_clients
from fedforget.core.seeds import derive_seed
from fedforget.methods.replay.server import SEED_ARTIFACT

ROOT = Path(__file__).resolve().parent.parent
NODES = (10, 100, 1000)
ROUNDS = (10, 50)
FRACTIONS = (1.0, 0.5, 0.2, 0.1, 0.05)


def replayed_share(nodes: int, rounds: int, fraction: float, seed: int) -> list[float]:
    """For each partition: the share of rounds a forget of one of its records replays."""
    first: dict[int, int] = {}
    for r in range(1, rounds + 1):
        for p in sample_clients(list(range(nodes)), fraction, derive_seed(seed, "sample", SEED_ARTIFACT, r)):
            first.setdefault(p, r)
    return [(rounds - first[p] + 1) / rounds if p in first else 0.0 for p in range(nodes)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--out", default=str(ROOT / "docs" / "results" / "replay_rounds"))
    args = parser.parse_args(argv)
    machine = machine_info()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for nodes in NODES:
        for rounds in ROUNDS:
            for fraction in FRACTIONS:
                shares = [s for seed in seeds for s in replayed_share(nodes, rounds, fraction, seed)]
                rows.append({"nodes": nodes, "rounds": rounds, "fraction-train": fraction,
                             "mean-replayed": statistics.fmean(shares), "worst-replayed": max(shares),
                             "all-replayed": sum(s == 1.0 for s in shares) / len(shares)})
                row = rows[-1]
                print(f"{nodes:5d} nodes {rounds:3d} rounds fraction {fraction:<5}: replays "
                      f"{row['mean-replayed']:.2f} of the rounds on average (worst {row['worst-replayed']:.2f})")
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"machine": machine, "seeds": seeds, "rows": rows}, indent=1) + "\n")
    _plot(rows, out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.png')}")


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ROUNDS), figsize=(10, 3.6), sharey=True)
    for ax, rounds in zip(axes, ROUNDS, strict=True):
        for nodes in NODES:
            mine = [r for r in rows if r["rounds"] == rounds and r["nodes"] == nodes]
            ax.plot([r["fraction-train"] for r in mine], [r["mean-replayed"] for r in mine], marker="o",
                    label=f"{nodes} nodes")
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="retrain from scratch (fedavg)")
        ax.set_xscale("log")
        ax.set_xlabel("fraction-train")
        ax.set_title(f"{rounds} rounds")
    axes[0].set_ylabel("rounds replayed by a forget (mean share)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
