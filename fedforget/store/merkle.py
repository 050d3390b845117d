"""The Merkle tree of Certificate Transparency (RFC 9162, section 2.1), over a log's entries.

A leaf is ``sha256(0x00 || entry)``, an inner node ``sha256(0x01 || left || right)``; the tree of ``n`` leaves
splits at the largest power of two below ``n``. A signed root (a *head*) commits to every entry before it,
an *inclusion proof* of ``log2(n)`` hashes shows that one entry is under a head without the others, and a
later head whose first ``n`` leaves give an earlier head's root shows the log only grew. Pure: hashlib only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of(leaves: Sequence[bytes]) -> bytes:
    """The tree head of ``leaves`` (leaf hashes), computed in one pass."""
    frontier = Frontier()
    for leaf in leaves:
        frontier.append(leaf)
    return frontier.root()


class Frontier:
    """The roots of the perfect subtrees a log of ``size`` leaves decomposes into, largest first: appending a
    leaf and reading the root both cost ``O(log size)``, so a writer never re-reads the whole log."""

    def __init__(self, size: int = 0, nodes: Sequence[bytes] = ()) -> None:
        self.size = size
        self.nodes = list(nodes)
        if len(self.nodes) != bin(size).count("1"):
            raise ValueError("a frontier holds one node per set bit of its size")

    def append(self, leaf: bytes) -> None:
        self.nodes.append(leaf)
        self.size += 1
        merges = (self.size & -self.size).bit_length() - 1  # trailing zeros: how many subtrees close
        for _ in range(merges):
            right = self.nodes.pop()
            self.nodes[-1] = node_hash(self.nodes[-1], right)

    def root(self) -> bytes:
        if not self.nodes:
            return EMPTY_ROOT
        out = self.nodes[-1]
        for node in reversed(self.nodes[:-1]):
            out = node_hash(node, out)
        return out

    def copy(self) -> Frontier:
        return Frontier(self.size, self.nodes)

    def to_json(self) -> dict[str, object]:
        return {"size": self.size, "nodes": [n.hex() for n in self.nodes]}

    @classmethod
    def from_json(cls, data: object) -> Frontier:
        if not isinstance(data, dict) or not isinstance(data.get("size"), int) or \
                not isinstance(data.get("nodes"), list):
            raise ValueError("not a frontier")
        return cls(int(data["size"]), [bytes.fromhex(str(n)) for n in data["nodes"]])


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of ``leaves`` (RFC 9162, 2.1.3.1)."""
    if not 0 <= index < len(leaves):
        raise ValueError(f"leaf {index} is not in a tree of {len(leaves)}")
    path: list[bytes] = []
    lo, hi = 0, len(leaves)
    while hi - lo > 1:
        k = _split(hi - lo)
        if index - lo < k:
            path.append(root_of(leaves[lo + k:hi]))
            hi = lo + k
        else:
            path.append(root_of(leaves[lo:lo + k]))
            lo += k
    return list(reversed(path))


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> bool:
    """Whether ``proof`` shows leaf ``index`` of a tree of ``size`` leaves under ``root`` (RFC 9162, 2.1.3.2)."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root
