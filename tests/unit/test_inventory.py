import pytest

from fedforget.core.inventory import ArtifactRecord, Inventory


def _inventory() -> Inventory:
    inv = Inventory()
    inv.add(ArtifactRecord("a", "0" * 64, "lora", ["0:0", "0:1"]))
    inv.add(ArtifactRecord("b", "1" * 64, "lora", ["1:0"], meta={"phase": 2}))
    inv.set_serving(["a", "b"])
    return inv


def test_inventory_round_trips_through_json():
    inv = _inventory()
    again = Inventory.from_json(inv.to_json())
    assert again.to_json() == inv.to_json()
    assert again.artifacts["b"].meta == {"phase": 2}


def test_forgetting_a_unit_invalidates_exactly_the_artifacts_that_saw_it():
    inv = _inventory()
    assert inv.invalidate_units(["0:1"]) == ["a"]
    assert not inv.artifacts["a"].valid and inv.artifacts["b"].valid
    assert inv.invalidate_units(["0:1"]) == []


def test_serving_an_unknown_artifact_is_refused():
    with pytest.raises(KeyError, match="unknown artifact"):
        _inventory().set_serving(["zzz"])
