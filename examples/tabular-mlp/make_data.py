"""Write the example's records: 3 nodes' ``data/node-<p>/train.parquet`` and the server's ``data/server/test.parquet``.

Four Gaussian classes in 16 features, drawn from a fixed seed, so the files are the same on every machine.
Each file has the node data columns: ``record_id`` (text), ``label`` (0..3) and ``features`` (16 numbers).
"""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

NODES, ROWS_PER_NODE, TEST_ROWS, FEATURES, CLASSES = 3, 40, 80, 16, 4


def draw(rng: np.random.Generator, centres: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, CLASSES, rows)
    return np.round(centres[labels] + rng.normal(0, 1.0, (rows, FEATURES)), 4), labels


def write(path: Path, prefix: str, features: np.ndarray, labels: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"record_id": [f"{prefix}-{i:03d}" for i in range(len(labels))],
                      "label": pa.array(labels, pa.int64()),
                      "features": pa.array(features.tolist(), pa.list_(pa.float64()))})
    pq.write_table(table, path)


def main(root: Path = Path(__file__).parent / "data") -> None:
    rng = np.random.default_rng(7)
    centres = rng.normal(0, 1.5, (CLASSES, FEATURES))
    for node in range(NODES):
        write(root / f"node-{node}" / "train.parquet", f"patient-{node}", *draw(rng, centres, ROWS_PER_NODE))
    write(root / "server" / "test.parquet", "test", *draw(rng, centres, TEST_ROWS))


if __name__ == "__main__":
    main()
