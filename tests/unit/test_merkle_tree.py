"""The log's Merkle tree is RFC 6962/9162's: known vectors, the root against the recursive definition, and
every inclusion proof verifies while a wrong leaf, position or root does not."""

from __future__ import annotations

import hashlib

from fedforget.store.merkle import EMPTY_ROOT, inclusion_proof, leaf_hash, node_hash, root_of, verify_inclusion


def mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 section 2.1, literally: MTH({}) = SHA-256(), MTH of one leaf is it, else split at k < n."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


def leaves(n: int) -> list[bytes]:
    return [leaf_hash(f"entry {i}".encode()) for i in range(n)]


def test_the_empty_root_and_the_leaf_of_nothing_are_rfc_6962s():
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert root_of([]) == EMPTY_ROOT
    assert leaf_hash(b"").hex() == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"


def test_the_root_is_the_recursive_tree_head_for_every_size_up_to_70():
    for n in range(71):
        assert root_of(leaves(n)) == mth(leaves(n)), n


def test_every_inclusion_proof_verifies_and_a_wrong_leaf_position_or_root_does_not():
    for n in range(1, 71):
        tree = leaves(n)
        root = root_of(tree)
        for i in range(n):
            proof = inclusion_proof(i, tree)
            assert verify_inclusion(i, n, tree[i], proof, root), (i, n)
            assert not verify_inclusion(i, n, leaf_hash(b"not an entry"), proof, root)
            assert not verify_inclusion(i, n, tree[i], proof, leaf_hash(b"another root"))
            if n > 1:
                assert not verify_inclusion((i + 1) % n, n, tree[i], proof, root)
                assert not verify_inclusion(i, n, tree[i], proof[:-1], root)
            assert not verify_inclusion(i, n, tree[i], [*proof, root], root)
        assert not verify_inclusion(n, n, tree[0], [], root)
