"""Write the app's records as CSV, one column per feature: each node's ``data/node-<p>/train.csv`` and
``test.csv``, and the server's ``data/server/test.csv`` (columns ``record_id,label,f0..f15``).

Four Gaussian classes in 16 features from a fixed seed: the same files on every machine.
"""

import csv
from pathlib import Path

import numpy as np

NODES, TRAIN_ROWS, NODE_TEST_ROWS, SERVER_TEST_ROWS, FEATURES, CLASSES = 3, 48, 16, 80, 16, 4


def write_csv(path: Path, prefix: str, rng: np.random.Generator, centres: np.ndarray, rows: int) -> None:
    labels = rng.integers(0, CLASSES, rows)
    values = np.round(centres[labels] + rng.normal(0, 1.0, (rows, FEATURES)), 4)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["record_id", "label", *(f"f{i}" for i in range(FEATURES))])
        for i, (label, row) in enumerate(zip(labels.tolist(), values.tolist(), strict=True)):
            writer.writerow([f"{prefix}-{i:03d}", label, *row])


def main(root: Path = Path(__file__).parent / "data") -> None:
    rng = np.random.default_rng(2024)
    centres = rng.normal(0, 1.2, (CLASSES, FEATURES))
    for node in range(NODES):
        write_csv(root / f"node-{node}" / "train.csv", f"member-{node}", rng, centres, TRAIN_ROWS)
        write_csv(root / f"node-{node}" / "test.csv", f"member-{node}-test", rng, centres, NODE_TEST_ROWS)
    write_csv(root / "server" / "test.csv", "holdout", rng, centres, SERVER_TEST_ROWS)


if __name__ == "__main__":
    main()
