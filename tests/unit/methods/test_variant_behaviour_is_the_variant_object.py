"""A chains, split or SAFE variant's differences are one object its Strategy class names (a layout, a
protocol): the family's code asks that object, and no module of the family compares a variant's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fedforget.methods.chains.plan import ChainLayout, chain_layout
from fedforget.methods.chains.strategy import S3T, SISA, FedCIO, FedSGT
from fedforget.methods.hosfl.plan import SplitProtocol, split_protocol
from fedforget.methods.hosfl.strategy import HOSFL, SFL, ZOSFL
from fedforget.methods.safe.config import SafeLayout, safe_layout
from fedforget.methods.safe.strategy import SAFE, ProtoSISA

METHODS = Path(__file__).parents[3] / "fedforget" / "methods"
FAMILIES = ("chains", "hosfl", "safe")
VARIANTS = {cls.variant for cls in (FedSGT, S3T, SISA, FedCIO, HOSFL, SFL, ZOSFL, SAFE, ProtoSISA)}


def _names_a_variant(node: ast.expr) -> bool:
    """A variant's name, or a collection of them, or ``method``/``x.method`` (what a name is read from)."""
    if isinstance(node, ast.Constant):
        return node.value in VARIANTS
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_variant(e) for e in node.elts)
    return (isinstance(node, ast.Name) and node.id == "method") or (
        isinstance(node, ast.Attribute) and node.attr == "method")


def _name_comparisons(path: Path) -> list[str]:
    """``x.method == "fedsgt"``, ``method in ("s3t", ...)``, ``{"sfl": ...}[cfg.method]`` in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_names_a_variant(o) for o in operands):
                found.append(f"{path.name}:{node.lineno}")
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):
            if any(k is not None and _names_a_variant(k) for k in node.value.keys):
                found.append(f"{path.name}:{node.lineno}")
    return found


@pytest.mark.parametrize("family", FAMILIES)
def test_no_module_of_a_variant_family_compares_a_variant_name(family):
    found = [hit for path in sorted((METHODS / family).glob("*.py")) for hit in _name_comparisons(path)]
    assert not found, f"ask the variant's object instead of comparing its name: {found}"


@pytest.mark.parametrize(("strategy", "attribute", "kind", "lookup"), [
    *((s, "layout", ChainLayout, chain_layout) for s in (FedSGT, S3T, SISA, FedCIO)),
    *((s, "protocol", SplitProtocol, split_protocol) for s in (HOSFL, SFL, ZOSFL)),
    *((s, "layout", SafeLayout, safe_layout) for s in (SAFE, ProtoSISA)),
])
def test_each_strategy_names_the_object_its_run_config_method_stands_for(strategy, attribute, kind, lookup):
    obj = getattr(strategy, attribute)
    assert isinstance(obj, kind) and obj.name == strategy.variant
    assert lookup(strategy.variant) is obj


def test_fedcio_start_num_rounds_sets_the_rounds_its_one_position_trains():
    """FedCIO trains each cluster's one position ``num-rounds`` rounds: that is what ``num_rounds`` sets."""
    cfg = FedCIO().run_config(num_rounds=7)
    assert cfg.num_rounds == 7
    assert chain_layout("fedcio").rounds(cfg) == 7
    assert chain_layout("fedsgt").rounds(FedSGT().run_config(num_rounds=4)) == 4
