"""The one evaluate message (what is served, to a node) survives its record form, refuses what a store never
holds, and its answers aggregate as Flower's FedAvg aggregates evaluations: the mean weighted by each node's
test records, in partition order, a node without records abstaining, none at all giving no result. A method
that reads the server's test rows while it trains is refused where the server holds none."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedforget.core.config import ConfigError
from fedforget.federation.control_messages import MalformedMessage
from fedforget.federation.driver import _check_server_test, served_line
from fedforget.federation.evaluate_messages import EvaluateResult, EvaluateServed, served_entries
from fedforget.federation.federated_evaluation import check_evaluation, weighted_evaluation
from fedforget.federation.message_types import EVALUATE_SERVED
from fedforget.federation.metrics_rows import federated_fields, federated_metrics

SHA = "ab" * 32


@pytest.fixture
def task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower builds a Message only inside a task: give this process one, for this test only."""
    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def answer(partition: int, accuracy: float, loss: float, examples: int) -> Message:
    return Message(EvaluateResult(partition, accuracy, loss, examples).to_record(), dst_node_id=1,
                   message_type=EVALUATE_SERVED)


def test_the_evaluate_message_carries_the_plan_the_choice_and_the_served_tensors_unchanged():
    tensors = {SHA: {"lora_A": np.arange(6, dtype=np.float32).reshape(2, 3), "head.bias": np.ones(3, np.float64)}}
    sent = EvaluateServed({"kind": "single", "artifact": "fedavg/global"},
                          {"available": True, "artifacts": ["fedavg/global"]},
                          ({"artifact": "fedavg/global", "sha256": SHA, "kind": "lora+head", "meta": {"slot": "d"}},),
                          tensors, 10, 3)
    got = EvaluateServed.from_record(sent.to_record())
    assert (got.plan, got.serving, got.artifacts, got.num_classes, got.server_round) == (
        sent.plan, sent.serving, sent.artifacts, 10, 3)
    arrays = got.store().get_arrays(SHA)
    assert set(arrays) == {"lora_A", "head.bias"}
    assert all(arrays[k].dtype == v.dtype and np.array_equal(arrays[k], v) for k, v in tensors[SHA].items())
    with pytest.raises(MalformedMessage, match="no artifact"):
        got.store().get_arrays("cd" * 32)


def test_an_evaluate_message_without_what_a_store_holds_is_refused():
    with pytest.raises(MalformedMessage, match="no ConfigRecord"):
        EvaluateServed.from_record(RecordDict())
    with pytest.raises(MalformedMessage, match="malformed evaluate config"):
        EvaluateServed.from_record(RecordDict({"config": ConfigRecord({"plan": "{"})}))
    bad = RecordDict({"config": ConfigRecord({"plan": "[]", "serving": "{}", "artifacts": "[]", "num-classes": 2,
                                              "server-round": 1})})
    with pytest.raises(MalformedMessage, match="not what a store holds"):
        EvaluateServed.from_record(bad)


def test_only_the_served_artifacts_entries_travel():
    artifacts = [{"artifact": a, "sha256": s, "kind": "lora+head", "meta": {}, "valid": True, "watermark": 0}
                 for a, s in (("a", "1" * 64), ("b", "2" * 64))]
    assert served_entries({"artifacts": ["b"]}, artifacts) == (
        {"artifact": "b", "sha256": "2" * 64, "kind": "lora+head", "meta": {}},)


def test_answers_are_weighted_by_their_records_in_partition_order_and_a_node_without_any_abstains(task_identity):
    replies = [answer(2, 0.5, 2.0, 30), answer(0, 1.0, 0.5, 10), answer(1, 0.0, 9.0, 0)]
    metrics = weighted_evaluation(replies)
    assert metrics is not None
    assert dict(metrics) == {"accuracy": (1.0 * 10 + 0.5 * 30) / 40, "loss": (0.5 * 10 + 2.0 * 30) / 40,
                             "num-examples": 40, "nodes": 2}
    assert weighted_evaluation([answer(0, 0.0, 0.0, 0)]) is None
    assert weighted_evaluation([]) is None


def test_a_nodes_answer_is_held_to_its_partition_and_plausible_values(task_identity):
    assert check_evaluation(answer(1, 0.5, 1.0, 10), 1, 100) is None
    assert "claims partition 2" in check_evaluation(answer(2, 0.5, 1.0, 10), 1, 100)
    assert "implausible accuracy" in check_evaluation(answer(1, 1.5, 1.0, 10), 1, 100)
    assert "implausible accuracy" in check_evaluation(answer(1, 0.5, float("nan"), 10), 1, 100)
    assert "num-examples" in check_evaluation(answer(1, 0.5, 1.0, 101), 1, 100)
    empty = Message(RecordDict(), dst_node_id=1, message_type=EVALUATE_SERVED)
    assert "no MetricRecord" in check_evaluation(empty, 1, 100)


def test_the_final_rows_federated_fields_read_back_as_the_aggregate():
    aggregate = {"accuracy": 0.75, "loss": 0.5, "num-examples": 40, "nodes": 2, "bad": float("nan")}
    fields = federated_fields(aggregate)
    assert fields == {"federated-accuracy": 0.75, "federated-loss": 0.5, "federated-examples": 40,
                      "federated-nodes": 2}
    assert federated_metrics({"final": True, "accuracy": 0.7, **fields}) == {
        "accuracy": 0.75, "loss": 0.5, "num-examples": 40, "nodes": 2}


def test_a_method_that_reads_the_servers_test_rows_is_refused_where_the_server_holds_none():
    empty = SimpleNamespace(examples=[])
    needs = type("NeedsRows", (), {"needs_server_test_rows": True})()
    with pytest.raises(ConfigError, match="NeedsRows reads the server's test set.*test-data"):
        _check_server_test(needs, empty)
    _check_server_test(type("Plain", (), {"needs_server_test_rows": False})(), empty)
    _check_server_test(needs, SimpleNamespace(examples=[1]))


@pytest.mark.parametrize(("result", "federated", "said"), [
    ({"accuracy": 0.9}, {"accuracy": 0.85}, "serving accuracy 0.9000, 0.8500 on the nodes' test records"),
    ({"accuracy": float("nan")}, {"accuracy": 0.85}, "serving accuracy 0.8500 on the nodes' test records"),
    ({"accuracy": 0.9}, None, "serving accuracy 0.9000"),
], ids=["both", "nodes-only", "server-only"])
def test_the_closing_line_says_which_evaluation_each_accuracy_is(result, federated, said):
    assert served_line(result, {"available": True, "artifacts": ["a"]}, federated) == said
