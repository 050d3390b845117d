"""The split methods' typed messages: every one survives ``to_record`` → ``from_record`` unchanged (as
records of the names and keys the traffic ledger counts), and a record missing what its type needs is
refused as malformed."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from fedforget.federation.messaging import PARTITION_KEY
from fedforget.methods.hosfl.messages import (
    Activations,
    BackpropStep,
    ClientTheta,
    Cut,
    LambdaZo,
    MalformedMessage,
    ReplayForward,
    ReplyHead,
    RoundHead,
    SpsaZo,
    ThetaForward,
    ZoScalars,
)

HEAD = RoundHead(3, "abc123")
REPLY = ReplyHead(2, 3, 123.5)
P = 4


def _equal(a: object, b: object) -> bool:
    """Dataclasses field by field, tensors by dtype, shape and value."""
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(_equal(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(a))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


def _names(content: RecordDict) -> dict[str, list[str]]:
    return {name: list(record.keys()) for name, record in content.items()}


def _batch(n: int = 5, prefix: str = "") -> Cut:
    return Cut(torch.randn(n, 7), torch.ones(n, 3, dtype=torch.int64) if prefix else None)


REQUESTS = [
    ReplayForward(HEAD, 1, torch.arange(2 * P, dtype=torch.int64).reshape(2, P), torch.randn(2, P),
                  torch.arange(P, dtype=torch.int64)),
    ReplayForward(HEAD, 0, torch.zeros(0, P, dtype=torch.int64), torch.zeros(0, P), torch.arange(P)),
    ThetaForward(HEAD, torch.randn(11)),
    ThetaForward(HEAD, torch.randn(11), seed=2**40 + 7),
    ThetaForward(HEAD, local_step=4),
    LambdaZo(HEAD, torch.randn(5, 7)),
    SpsaZo(HEAD, 99, 0.25),
    BackpropStep(HEAD, 2, True, torch.randn(5, 7)),
    BackpropStep(HEAD, 0, False, torch.randn(5, 7)),
]
REPLIES = [
    (Activations(REPLY, 3, torch.arange(5), _batch()), {}),
    (Activations(REPLY, 3, torch.arange(5), _batch(prefix="text")), {}),
    (Activations(REPLY, 0, torch.arange(5), _batch(), local_steps=6), {"local_steps": True}),
    (Activations(REPLY, 3, torch.arange(5), _batch(prefix="plus"), _batch(prefix="minus")), {"spsa": True}),
    (ZoScalars(REPLY, torch.randn(P)), {"perturbations": P}),
    (ClientTheta(REPLY, torch.randn(11)), {"size": 11}),
    (ClientTheta(REPLY), {"theta": False}),
]


@pytest.mark.parametrize("message", REQUESTS, ids=lambda m: type(m).__name__)
def test_every_request_survives_its_record(message):
    content = message.to_record()
    assert _equal(type(message).from_record(content), message)
    assert list(content["control"].keys())[:2] == ["round", "run-tag"]


@pytest.mark.parametrize(("message", "expect"), REPLIES, ids=lambda m: type(m).__name__)
def test_every_reply_survives_its_record(message, expect):
    content = message.to_record()
    assert _equal(type(message).from_record(content, **expect), message)
    assert list(content["control"].keys())[:3] == [PARTITION_KEY, "round", "peak-rss-mb"]


def test_the_records_keep_the_names_the_traffic_ledger_counts():
    assert _names(REQUESTS[0].to_record()) == {"control": ["round", "run-tag", "history-from"],
                                               "aggregation": ["history-seeds", "history-vbar", "seeds"]}
    assert _names(REQUESTS[3].to_record()) == {"control": ["round", "run-tag", "seed"], "aggregation": ["theta"]}
    assert _names(REQUESTS[4].to_record()) == {"control": ["round", "run-tag", "local-step"]}
    assert _names(REQUESTS[7].to_record()) == {"control": ["round", "run-tag", "local-step", "last-step"],
                                               "feedback": ["lambda"]}
    spsa = REPLIES[3][0].to_record()
    assert _names(spsa) == {"activations": ["plus-z", "plus-mask", "minus-z", "minus-mask", "y"],
                            "control": [PARTITION_KEY, "round", "peak-rss-mb", "version"]}
    assert _names(REPLIES[6][0].to_record()) == {"control": [PARTITION_KEY, "round", "peak-rss-mb"]}


def test_spsa_scalar_travels_as_float32():
    got = SpsaZo.from_record(SpsaZo(HEAD, 1, 0.1).to_record())
    assert got.g == float(torch.tensor(0.1, dtype=torch.float32))


def _without(content: RecordDict, record: str, key: str | None = None) -> RecordDict:
    """``content`` with record ``record`` (or only its ``key``) removed."""
    out = {}
    for name, rec in content.items():
        if name == record and key is None:
            continue
        if name == record:
            rec = type(rec)({k: v for k, v in rec.items() if k != key})
        out[name] = rec
    return RecordDict(out)


@pytest.mark.parametrize(("record", "key", "expect"), [
    ("activations", None, {}),  # no activations at all
    ("activations", "z", {}),  # no z
    ("activations", "y", {}),  # no labels
    ("control", PARTITION_KEY, {}),
    ("control", "peak-rss-mb", {}),
    ("control", "version", {}),
    (None, None, {"spsa": True}),  # a plain reply where ZO-SFL's pair is due
])
def test_a_forward_reply_missing_what_it_needs_is_malformed(record, key, expect):
    content = REPLIES[0][0].to_record()
    with pytest.raises(MalformedMessage):
        Activations.from_record(content if record is None else _without(content, record, key), **expect)


def test_replies_that_do_not_fit_are_malformed():
    with pytest.raises(MalformedMessage, match="no ArrayRecord .aggregation."):
        ZoScalars.from_record(_without(ZoScalars(REPLY, torch.randn(P)).to_record(), "aggregation"), P)
    with pytest.raises(MalformedMessage, match="shape"):
        ZoScalars.from_record(ZoScalars(REPLY, torch.randn(P + 1)).to_record(), P)
    with pytest.raises(MalformedMessage, match="no ArrayRecord .aggregation."):
        ClientTheta.from_record(ClientTheta(REPLY).to_record())  # θ_c is due
    with pytest.raises(MalformedMessage, match="shape"):
        ClientTheta.from_record(ClientTheta(REPLY, torch.randn(10)).to_record(), size=11)
    with pytest.raises(MalformedMessage, match="flat float32"):
        ClientTheta.from_record(ClientTheta(REPLY, torch.randn(11, dtype=torch.float64)).to_record(), size=11)
    with pytest.raises(MalformedMessage, match="int64 label"):
        Activations.from_record(Activations(REPLY, 3, torch.zeros(5), _batch()).to_record())
    with pytest.raises(MalformedMessage, match="one row per label"):
        Activations.from_record(Activations(REPLY, 3, torch.arange(4), _batch()).to_record())
    with pytest.raises(MalformedMessage, match="local-steps"):
        Activations.from_record(REPLIES[0][0].to_record(), local_steps=True)
    bad = RecordDict({"activations": REPLIES[0][0].to_record()["activations"],
                      "control": ConfigRecord({PARTITION_KEY: 2, "round": 3, "peak-rss-mb": "lots", "version": 3})})
    with pytest.raises(MalformedMessage, match="peak-rss-mb"):
        Activations.from_record(bad)
    swapped = RecordDict({"activations": ConfigRecord({"z": 1}), "control": REPLIES[0][0].to_record()["control"]})
    with pytest.raises(MalformedMessage, match="no ArrayRecord .activations."):
        Activations.from_record(swapped)


def test_requests_that_do_not_fit_are_malformed():
    history = REQUESTS[0].to_record()
    arrays = {k: v for k, v in history["aggregation"].items()}
    arrays["seeds"] = ArrayRecord({"seeds": torch.arange(P + 1)})["seeds"]
    with pytest.raises(MalformedMessage, match="seeds"):
        ReplayForward.from_record(RecordDict({"control": history["control"], "aggregation": ArrayRecord(arrays)}))
    with pytest.raises(MalformedMessage, match="run-tag"):
        LambdaZo.from_record(_without(REQUESTS[5].to_record(), "control", "run-tag"))
    with pytest.raises(MalformedMessage, match="last-step"):
        BackpropStep.from_record(_without(REQUESTS[7].to_record(), "control", "last-step"))
