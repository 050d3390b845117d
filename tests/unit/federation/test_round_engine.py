"""The round engine: each group averaged in partition order whatever order replies arrive in, the server's own
term last, zero-example replies abstaining, a group no one trained keeping its start, the method's precision
honoured; and the strategy it is handed called directly, what its aggregate returns what the round goes on from."""

from __future__ import annotations

import numpy as np
import pytest

from fedforget.core.weighted_mean import weighted_mean
from fedforget.federation.round_engine import SERVER_ORDER, Contribution, group_means


def _state(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"lora_A": rng.standard_normal((4, 3)).astype(np.float32), "bias": rng.standard_normal(3).astype(np.float32)}


def _terms() -> list[Contribution]:
    return [Contribution("a", p, 10 + 7 * p, _state(p)) for p in range(5)] + [
        Contribution("b", 2, 5, _state(20)), Contribution("b", SERVER_ORDER, 3, _state(21))]


def _same(x: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> bool:
    return x.keys() == y.keys() and all(x[k].dtype == y[k].dtype and x[k].tobytes() == y[k].tobytes() for k in x)


def test_each_group_is_averaged_in_partition_order_whatever_order_the_replies_arrive_in():
    starts = {"a": _state(100), "b": _state(101)}
    ordered, _ = group_means(starts, _terms())
    shuffled, _ = group_means(starts, list(reversed(_terms())))
    assert all(_same(ordered[g], shuffled[g]) for g in starts)
    a = [c for c in _terms() if c.group == "a"]
    assert _same(ordered["a"], weighted_mean([c.arrays for c in a], [c.weight for c in a]))


def test_the_servers_term_is_summed_last():
    starts = {"b": _state(101)}
    means, weights = group_means(starts, _terms())
    b = [c for c in _terms() if c.group == "b"]
    assert _same(means["b"], weighted_mean([c.arrays for c in b], [c.weight for c in b]))  # given order: server last
    assert weights["b"] == 8


def test_zero_example_replies_abstain_and_a_group_no_one_trained_keeps_its_start():
    starts = {"a": _state(100), "idle": _state(102)}
    terms = _terms() + [Contribution("a", 9, 0, {k: np.full_like(v, np.nan) for k, v in _state(9).items()}),
                        Contribution("idle", 1, 0, _state(3))]
    means, weights = group_means(starts, terms)
    assert means["idle"] is starts["idle"] and "idle" not in weights
    assert _same(means["a"], group_means(starts, _terms())[0]["a"])  # the NaN reply with no examples added nothing


def test_the_methods_precision_is_honoured():
    starts = {"a": _state(100)}
    wide, _ = group_means(starts, _terms(), np.float64)
    narrow, _ = group_means(starts, _terms(), np.float32)
    a = [c for c in _terms() if c.group == "a"]
    assert _same(wide["a"], weighted_mean([c.arrays for c in a], [c.weight for c in a], accumulate=np.float64))
    assert wide["a"]["lora_A"].dtype == np.float32  # summed wide, rounded back once
    assert not _same(wide["a"], narrow["a"])  # negative control: the two precisions differ on these terms


def test_a_grouped_rounds_models_are_keyed_by_group_even_when_one_is_due_and_unpack_inverts_pack():
    from fedforget.federation.round_engine import pack, unpack

    one = {"chains/s0/q0/p1": _state(1)}
    assert all(k.startswith("chains/s0/q0/p1:") for k in pack(one))
    two = {"a": _state(1), "b": _state(2)}
    back = unpack(pack(two), two)
    assert all(_same(back[g], two[g]) for g in two)
    with pytest.raises(ValueError, match="no group of this round"):
        unpack(pack({"c": _state(3)}), {"a": _state(1)})
    with pytest.raises(ValueError, match="without the round's tensor 'bias'"):
        unpack(pack({"a": {"lora_A": _state(1)["lora_A"]}, "b": _state(2)}), two)
    with pytest.raises(ValueError, match="'lora_A' as it was"):
        unpack(pack({"a": {**_state(1), "lora_A": np.zeros((2, 2), np.float32)}, "b": _state(2)}), two)


class _OneGroupRound:
    """A round of one group over two partitions whose replies are made here (no Grid): each partition sends
    back its start plus its partition id, with 1 example."""

    @staticmethod
    def build(strategy):  # noqa: ANN001, ANN205
        from types import SimpleNamespace

        from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict

        from fedforget.federation.messaging import to_numpy, to_record
        from fedforget.federation.round_engine import Round, Send

        class Mine(Round):
            def configure_train(self, server_round, states):  # noqa: ANN001, ANN202
                return [Send(p, Message(RecordDict({"arrays": to_record(states["g"]), "config": ConfigRecord()}),
                                        dst_node_id=100 + p, message_type="train.mine"), lambda r: None, "g")
                        for p in (1, 2)]

            def exchange(self, sends):  # noqa: ANN001, ANN202
                replies = []
                for s in sends:
                    sent = to_numpy(s.message.content["arrays"])
                    content = RecordDict({"arrays": to_record({k: v + s.partition for k, v in sent.items()}),
                                          "metrics": MetricRecord({"num-examples": 1})})
                    replies.append(Message(content, dst_node_id=0, message_type="train.mine"))
                self.sent = [s.message for s in sends]
                return replies, set(), 0

            def contributions(self, send, reply):  # noqa: ANN001, ANN202
                return [Contribution("g", send.partition, 1, to_numpy(reply.content["arrays"]))]

        cfg = SimpleNamespace(round_timeout=1.0, action="train")
        run = SimpleNamespace(nodes={1: 101, 2: 102}, cfg=cfg, store=None, strategy=strategy)
        return Mine(None, run)


def test_the_engine_calls_the_strategy_it_is_handed_and_goes_on_from_what_its_aggregate_returns(tmp_path,
                                                                                                monkeypatch):
    from flwr.app import Array, ArrayRecord
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_node_id", "_task_id"):  # a Message is made inside a run
        monkeypatch.setattr(TaskIdentity, name, 1)

    from fedforget.strategies import FedShard

    class Halved(FedShard):
        configured: list[list[str]] = []

        def configure_train(self, server_round, arrays, config, grid):  # noqa: ANN001, ANN202
            messages = list(super().configure_train(server_round, arrays, config, grid))
            for m in messages:
                m.content["config"]["tag"] = server_round
            type(self).configured.append(list(arrays))
            return messages

        def aggregate_train(self, server_round, replies):  # noqa: ANN001, ANN202
            arrays, metrics = super().aggregate_train(server_round, replies)
            return ArrayRecord({k: Array(v.numpy() / 2) for k, v in arrays.items()}), metrics

    strategy = Halved(store=str(tmp_path / "s"))
    start = {"g": {"w": np.zeros(3, np.float32)}}
    plain = _OneGroupRound.build(FedShard(store=str(tmp_path / "s"))).run(1, start)
    rnd = _OneGroupRound.build(strategy)
    halved = rnd.run(1, start)
    assert plain.states["g"]["w"].tolist() == [1.5] * 3  # the mean of 0+1 and 0+2
    assert halved.states["g"]["w"].tolist() == [0.75] * 3  # what the override returned
    assert Halved.configured == [["g:w"]] and all(m.content["config"]["tag"] == 1 for m in rnd.sent)
    assert strategy._round is None  # outside a round a default hook says start() calls it


def test_fedavgs_round_counts_a_zero_example_reply_at_weight_zero_as_flowers_fedavg_does(monkeypatch):
    from types import SimpleNamespace

    from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords
    from flwr.supercore.task_identity import TaskIdentity

    from fedforget.federation.messaging import to_record
    from fedforget.methods.fedavg.server import ARTIFACT, FedAvgRound

    for name in ("_run_id", "_node_id", "_task_id"):  # a Message is made inside a run
        monkeypatch.setattr(TaskIdentity, name, 1)
    # partition 0 trained on nothing: its +0.0 term turns partition 1's -0.0 into +0.0, as in Flower's sum
    states = {0: {"w": np.array([1.0, 2.0], np.float32)}, 1: {"w": np.array([-0.0, 3.0], np.float32)}}
    examples = {0: 0, 1: 5}
    replies = [Message(RecordDict({"arrays": to_record(states[p]), "metrics": MetricRecord(
        {"partition-id": p, "num-examples": examples[p], "train-loss": 0.5})}), dst_node_id=0,
        message_type="train.fedavg") for p in (1, 0)]
    cfg = SimpleNamespace(round_timeout=1.0, action="train", num_rounds=1)
    rnd = FedAvgRound(None, SimpleNamespace(nodes={0: 10, 1: 11}, cfg=cfg, store=None, strategy=None))
    rnd.train_config = ConfigRecord()
    got = rnd.aggregate_train(1, {ARTIFACT: states[0]}, [], replies).states[ARTIFACT]["w"]
    flower = aggregate_arrayrecords([r.content for r in sorted(replies, key=lambda r: int(
        r.content["metrics"]["partition-id"]))], "num-examples")["w"].numpy()
    assert got.tobytes() == flower.tobytes() and not np.signbit(got[0])
    abstaining, _ = group_means({"g": states[0]}, [Contribution("g", p, examples[p], states[p]) for p in (0, 1)])
    assert np.signbit(abstaining["g"]["w"][0])  # negative control: the grouped rounds' abstention differs here
