"""Which trained prefixes serve after deletions (FedSGT §2.5 AllSeq/MinSeq/LongSeq, S3T A5).

A sequence whose group at position ``k`` (0-based) is affected keeps its first ``k`` modules: they were
trained only on groups before it. These functions decide, from those prefix lengths alone, which
sequences answer queries and with what weight; the caller combines the models' outputs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

STRATEGIES = ("allseq", "minseq", "longseq")


def active_prefix(sequence: Sequence[int], affected: Collection[int]) -> int:
    """Number of leading groups of ``sequence`` that are not affected: the modules still usable."""
    n = 0
    for g in sequence:
        if g in affected:
            break
        n += 1
    return n


def _normalised(indices: list[int], prefixes: Sequence[int]) -> list[tuple[int, float]]:
    total = sum(prefixes[i] for i in indices)
    return [(i, prefixes[i] / total) for i in sorted(indices)]


def _greedy_cover(sequences: Sequence[Sequence[int]], prefixes: Sequence[int]) -> list[int]:
    """MinSeq as greedy minimum set cover of the clean groups by active prefixes (reproduces FedSGT Table II).

    Each step takes the sequence adding most uncovered groups, then the longer prefix, then the lower index;
    it stops when no sequence adds a group. Its first pick is LongSeq's choice.
    """
    covered: set[int] = set()
    chosen: list[int] = []
    while True:
        best, best_key = -1, (0, 0)
        for i, (seq, a) in enumerate(zip(sequences, prefixes, strict=True)):
            if a < 1 or i in chosen:
                continue
            key = (len(set(seq[:a]) - covered), a)
            if key > best_key:
                best, best_key = i, key
        if best < 0 or best_key[0] == 0:
            return chosen
        chosen.append(best)
        covered.update(sequences[best][: prefixes[best]])


def select_serving(sequences: list[tuple[int, ...]], prefixes: list[int], strategy: str) -> list[tuple[int, float]]:
    """(sequence index, weight) pairs in ascending index order, weights summing to 1; [] when nothing survives.

    * ``allseq``: every sequence with an active prefix, weight ∝ prefix (FedSGT's default).
    * ``longseq``: the longest prefix alone, ties to the lowest index (S3T's rule).
    * ``minseq``: the greedy set cover of :func:`_greedy_cover`, weights ∝ prefix like AllSeq.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown serving strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if len(sequences) != len(prefixes):
        raise ValueError(f"{len(sequences)} sequences but {len(prefixes)} prefix lengths")
    for i, (seq, a) in enumerate(zip(sequences, prefixes, strict=True)):
        if not 0 <= a <= len(seq):
            raise ValueError(f"prefix {a} of sequence {i} is outside 0..{len(seq)}")
    alive = [i for i, a in enumerate(prefixes) if a >= 1]
    if not alive:
        return []
    if strategy == "allseq":
        return _normalised(alive, prefixes)
    if strategy == "longseq":
        longest = max(alive, key=lambda i: (prefixes[i], -i))
        return [(longest, 1.0)]
    return _normalised(_greedy_cover(sequences, prefixes), prefixes)
