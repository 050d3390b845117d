"""The evaluate-message benchmark counts Flower's wire bytes and books each to one part: the parts add up to the
message, the tensors cost at least their raw bytes, and SAFE's message planned for more nodes grows in its plan
while the plan values its serving hook uses stay a hundred-odd bytes."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message
from flwr.supercore.task_identity import TaskIdentity

from fedforget.federation.carried_config import RUN_CONFIG_RECORD
from fedforget.federation.evaluate_messages import EvaluateServed
from fedforget.federation.message_types import EVALUATE_SERVED

from ..benchmark_scripts import benchmark_script


@pytest.fixture(scope="module")
def bench():  # noqa: ANN201
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    with benchmark_script("evaluate_message_bytes") as module:
        yield module


def _served(plan: dict, tensors: dict[str, dict[str, np.ndarray]], entries: tuple[dict, ...]) -> EvaluateServed:
    serving = {"available": True, "artifacts": [e["artifact"] for e in entries]}
    return EvaluateServed(plan, serving, entries, tensors, 10, 2)


def _message(served: EvaluateServed) -> Message:
    content = served.to_record()
    content[RUN_CONFIG_RECORD] = ConfigRecord({"method": "fedavg", "num-rounds": 2, "lr": 0.02})
    return Message(content, dst_node_id=7, message_type=EVALUATE_SERVED)


def test_the_parts_add_up_to_the_message_and_tensors_cost_at_least_their_bytes(bench) -> None:
    rng = np.random.default_rng(0)
    tensors = {"a" * 64: {"w": rng.standard_normal((32, 16)).astype(np.float32), "b": np.zeros(16, np.float32)}}
    entries = ({"artifact": "fedavg/global", "sha256": "a" * 64, "kind": "lora+head", "meta": {}},)
    measured = bench.evaluate_parts(_message(_served({"kind": "fedavg"}, tensors, entries)))
    assert sum(measured["parts"].values()) == measured["total"] == bench.message_bytes(
        _message(_served({"kind": "fedavg"}, tensors, entries)))
    assert measured["parts"]["rest"] >= 0 and measured["parts"]["carried-config"] > 0
    assert measured["served-model-bytes"] == 32 * 16 * 4 + 16 * 4
    assert measured["parts"]["tensors"] >= measured["served-model-bytes"]


def test_a_bigger_plan_is_booked_to_the_plan(bench) -> None:
    entries = ({"artifact": "x", "sha256": "b" * 64, "kind": "lora+head", "meta": {}},)
    tensors = {"b" * 64: {"w": np.ones(4, np.float32)}}
    small = bench.evaluate_parts(_message(_served({"kind": "k"}, tensors, entries)))
    large = bench.evaluate_parts(_message(_served({"kind": "k", "sizes": {f"{p}:0": p for p in range(500)}},
                                                  tensors, entries)))
    grown = {k: large["parts"][k] - small["parts"][k] for k in small["parts"]}
    # a value measured alone differs from its share of the whole record by its length prefix's bytes at most
    assert grown["plan"] > 4000 and grown["plan"] == pytest.approx(large["total"] - small["total"], abs=4)


def test_safes_planned_message_grows_in_its_plan_not_in_what_the_hook_reads(bench) -> None:
    rng = np.random.default_rng(1)
    adapter = {"queries": rng.standard_normal((5, 8)).astype(np.float32), "classes": np.arange(5)}
    proto = {"sum": rng.standard_normal(8), "label": np.array([0]), "count": np.array([3])}
    entries = tuple({"artifact": f"safe/g{g}/f{f}", "sha256": f"{g}{f}" * 32, "kind": "inca", "meta": {}}
                    for g in range(2) for f in range(2)) + (
        {"artifact": "safe/proto/p0/c0", "sha256": "c" * 64, "kind": "prototype", "meta": {"label": 0}},)
    tensors = {e["sha256"]: adapter for e in entries[:4]} | {"c" * 64: proto}
    template = _served({"kind": "safe"}, tensors, entries)
    carried = ConfigRecord({"method": "safe"})
    few, many = (bench.safe_message_at(n, template, carried, seed=3) for n in (4, 40))
    assert many["parts"]["plan"] > 5 * few["parts"]["plan"]
    # kind, method, class count, prototypes and λ: a hundred-odd bytes whatever the nodes (λ's digits vary)
    assert max(many["plan-read-by-serving-hook"], few["plan-read-by-serving-hook"]) < 160 < few["parts"]["plan"]
    assert many["served-artifacts"] == many["cells"] + 4  # one prototype per cell beside the four adapters
