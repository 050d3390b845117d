"""A task's own loss and metric: the loss replaces cross-entropy in the training loop (no loss is cross-entropy,
bit for bit) while a method's own terms still add to it; each method's declaration says whether its training
takes a loss, and a method that does not refuses the task in one line; a metric's values are checked, reported
beside accuracy and loss, and the nodes' values are weighted by their test records like accuracy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from flwr.app import RecordDict
from torch import nn

from fedforget.client import Task
from fedforget.core.config import ConfigError
from fedforget.federation.evaluate_messages import EvaluateResult
from fedforget.federation.federated_evaluation import check_evaluation, weighted_evaluation
from fedforget.federation.serve import probability_metrics
from fedforget.methods.registry import BY_VARIANT, FAMILIES
from fedforget.tasks.task_functions import (
    check_task_functions,
    manifest_entry,
    metric_names,
    metric_values,
    probe_metric,
    refuse_task_loss,
    retrain_entry,
)
from fedforget.training.supervised import TrainSettings, train_supervised

#: the methods whose nodes train by train_supervised, and those whose training cannot take a task's loss
TAKES_LOSS = {"fedavg", "replay", "fedshard", "sisa", "fedcio", "fedsgt", "s3t"}
REFUSES_LOSS = {"safe", "protosisa", "hosfl", "sfl", "zo-sfl"}


def make_backbone() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8))


def accuracy_metric(probabilities: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    return {"balanced": float((probabilities.argmax(1) == labels).mean())}


def smoothed(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits, labels, label_smoothing=0.3)


def task(**functions: object) -> Task:
    return Task(name="mine", backbone=make_backbone, feature_dim=8, lora_targets=["0"], num_classes=3, **functions)


def trained(settings: TrainSettings) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    gen = torch.Generator().manual_seed(1)
    inputs, labels = torch.randn(40, 4, generator=gen), torch.randint(0, 3, (40,), generator=gen)
    train_supervised(model, (inputs,), labels, settings)
    return [p.detach().clone() for p in model.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


BASE = TrainSettings(epochs=2, batch_size=8, lr=0.05, optimizer="sgd", seed=7)


def test_no_loss_trains_with_cross_entropy_bit_for_bit_and_a_tasks_loss_trains_other_bits():
    cross_entropy = trained(dataclasses.replace(BASE, loss=nn.functional.cross_entropy))
    assert same(trained(BASE), cross_entropy)  # the task's loss replaces exactly the cross-entropy term
    assert not same(trained(dataclasses.replace(BASE, loss=smoothed)), cross_entropy)
    assert same(trained(dataclasses.replace(BASE, loss=smoothed)), trained(dataclasses.replace(BASE, loss=smoothed)))


def test_a_methods_own_terms_still_add_to_the_tasks_loss():
    own = trained(dataclasses.replace(BASE, loss=smoothed))
    assert not same(trained(dataclasses.replace(BASE, loss=smoothed, proximal_mu=0.5)), own)
    term = dataclasses.replace(BASE, loss=smoothed, loss_term=lambda logits, labels, params: logits.pow(2).mean())
    assert not same(trained(term), own)


def test_a_loss_that_returns_no_scalar_tensor_is_one_error_naming_it():
    def per_example(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits, labels, reduction="none")

    with pytest.raises(ValueError, match="per_example.*must return a scalar tensor"):
        trained(dataclasses.replace(BASE, loss=per_example))


def test_every_method_declares_whether_its_training_takes_a_tasks_loss():
    declared = {v: m.refuses_task_loss is None for m in FAMILIES for v in m.variants}
    assert {v for v, takes in declared.items() if takes} == TAKES_LOSS
    assert {v for v, takes in declared.items() if not takes} == REFUSES_LOSS


@pytest.mark.parametrize("variant", sorted(REFUSES_LOSS))
def test_a_method_that_takes_no_loss_refuses_a_task_with_one_in_one_line_naming_it_and_why(variant):
    method = BY_VARIANT[variant]
    with pytest.raises(ConfigError) as caught:
        refuse_task_loss(method, variant, task(loss=smoothed).spec)
    line = str(caught.value)
    assert line.startswith(f"method {variant!r} does not train with a task's own loss: {method.refuses_task_loss}")
    assert "\n" not in line
    refuse_task_loss(method, variant, task(metric=accuracy_metric).spec)  # a metric every method takes


@pytest.mark.parametrize("variant", sorted(TAKES_LOSS))
def test_a_method_that_trains_by_the_supervised_loop_takes_the_tasks_loss(variant):
    assert check_task_functions(BY_VARIANT[variant], variant, task(loss=smoothed, metric=accuracy_metric).spec) \
        == ["balanced"]


def test_a_metrics_values_stand_beside_accuracy_and_loss():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.6, 0.3, 0.1]])
    labels = torch.tensor([0, 1, 1, 0])
    plain = probability_metrics(probs, labels)
    assert probability_metrics(probs, labels, accuracy_metric) == {**plain, "balanced": 0.75}


@pytest.mark.parametrize(("returned", "why"), [
    (0.5, "returned float, not a dict"), ({}, "returned dict, not a dict"),
    ({"accuracy": 1.0}, "fedforget reports itself"), ({"federated-f1": 1.0}, "fedforget reports itself"),
    ({"Macro F1": 1.0}, "lower-case letters"), ({"f1": float("nan")}, "not a finite number"),
    ({"f1": "high"}, "not a number"), ({"f1": True}, "not a finite number")])
def test_a_metric_that_reports_what_a_metrics_row_cannot_hold_is_one_error(returned, why):
    with pytest.raises(ValueError, match=why):
        metric_values(lambda p, y: returned, np.ones((2, 2)) / 2, np.array([0, 1]))


def test_a_failing_metric_is_refused_before_the_run_in_one_line():
    def broken(probabilities: np.ndarray, labels: np.ndarray) -> dict[str, float]:
        raise KeyError("oops")

    with pytest.raises(ConfigError, match="Task\\(metric=...\\) of task 'mine' fails on uniform probabilities: "
                                          "KeyError"):
        probe_metric(task(metric=broken).spec)
    assert probe_metric(task().spec) == []


def test_the_manifest_names_the_tasks_functions_and_a_plain_task_records_nothing():
    entry = manifest_entry(task(loss=smoothed, metric=accuracy_metric).spec)
    assert entry == {"task-functions": {"loss": f"{__name__}:smoothed", "metric": f"{__name__}:accuracy_metric",
                                        "metric-names": ["balanced"]}}
    assert metric_names(entry) == ["balanced"] and metric_names({}) == []
    assert manifest_entry(task().spec) == {}


def test_a_task_refuses_a_loss_or_metric_that_is_not_a_function():
    for name in ("loss", "metric"):
        with pytest.raises(TypeError, match=f"Task\\({name}=...\\) must be a function"):
            task(**{name: "cross-entropy"})


@dataclasses.dataclass
class Reply:
    """What the aggregation reads of a node's reply: its content, and whether it is an error."""

    content: RecordDict

    def has_error(self) -> bool:
        return False


def reply(partition: int, accuracy: float, examples: int, **metrics: float) -> Reply:
    return Reply(EvaluateResult(partition, accuracy, 1.0 - accuracy, examples, metrics).to_record())


def test_the_nodes_metric_values_are_weighted_by_their_test_records_like_accuracy():
    replies = [reply(0, 0.5, 10, f1=0.2), reply(1, 1.0, 30, f1=0.6), reply(2, 0.0, 0, f1=0.0)]
    record = dict(weighted_evaluation(replies))
    assert record["f1"] == pytest.approx((0.2 * 10 + 0.6 * 30) / 40)
    assert record["accuracy"] == pytest.approx((0.5 * 10 + 1.0 * 30) / 40)
    assert (record["num-examples"], record["nodes"]) == (40, 2)
    assert "f1" not in dict(weighted_evaluation([reply(0, 0.5, 10)]))  # no metric: accuracy and loss only
    assert EvaluateResult.from_record(reply(1, 1.0, 30, f1=0.6).content).metrics == {"f1": 0.6}


def test_a_nodes_metric_values_are_counted_only_when_finite_and_named_as_the_tasks_metric_names_them():
    assert check_evaluation(reply(0, 0.5, 10, f1=0.3), 0, 100, ["f1"]) is None
    assert "not finite" in check_evaluation(reply(0, 0.5, 10, f1=float("inf")), 0, 100, ["f1"])
    assert "reports metric values ['f1', 'injected']" in check_evaluation(
        reply(0, 0.5, 10, f1=0.3, injected=1.0), 0, 100, ["f1"])
    assert "reports metric values []" in check_evaluation(reply(0, 0.5, 10), 0, 100, ["f1"])
    assert check_evaluation(reply(0, 0.5, 10), 0, 100) is None  # a task without a metric: as before
    assert check_evaluation(reply(0, 0.0, 0), 0, 100, ["f1"]) is None  # a node without test records abstains


def test_the_loss_and_metric_docs_your_app_shows_work_as_shown():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "your-app.md").read_text(encoding="utf-8")
    block = next(b for b in page.split("```python\n")[1:] if "def macro_f1" in b).split("```")[0]
    code = "\n".join(line for line in block.splitlines() if not line.startswith("TASK = "))
    namespace: dict[str, object] = {}
    exec(code, namespace)  # noqa: S102 - the page's own snippet
    spec = task(loss=namespace["smoothed_cross_entropy"], metric=namespace["macro_f1"]).spec
    assert check_task_functions(BY_VARIANT["fedavg"], "fedavg", spec) == ["macro-f1"]
    probs = np.array([[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.2, 0.7, 0.1]])
    assert metric_values(spec.metric, probs, np.array([0, 1, 2])) == {"macro-f1": pytest.approx((1 + 2 / 3 + 0) / 3)}
    assert not same(trained(dataclasses.replace(BASE, loss=spec.loss)), trained(BASE))


def method_table_rows() -> list[str]:
    """docs/strategies.md's table of what each method takes from a task, from the declarations."""
    rows = []
    for method in FAMILIES:
        classes = ", ".join(f"`{c.__name__}`" for c in method.strategies())
        variants = ", ".join(f"`{v}`" for v in method.variants)
        loss = "takes it" if method.refuses_task_loss is None else f"refuses it: {method.refuses_task_loss}"
        step = "takes it" if method.refuses_train_step is None else f"refuses it: {method.refuses_train_step}"
        rows.append(f"| {classes} | {variants} | {loss} | {step} | reports it |")
    return rows


def test_the_strategies_page_says_what_each_method_takes_as_the_declarations_do():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "strategies.md").read_text(encoding="utf-8")
    section = page.split("## What each method takes from your task", 1)[1].split("\n## ", 1)[0]
    shown = [line for line in section.splitlines() if line.startswith("| `")]
    assert shown == method_table_rows()


def test_a_retrain_refuses_another_loss_and_records_another_metric():
    trained_with = manifest_entry(task(loss=smoothed, metric=accuracy_metric).spec)
    assert retrain_entry(trained_with, task(loss=smoothed, metric=accuracy_metric).spec) is None
    for other in (task(metric=accuracy_metric), task(loss=nn.functional.cross_entropy, metric=accuracy_metric)):
        with pytest.raises(ConfigError, match=f"trained with Task\\(loss={__name__}:smoothed\\)"):
            retrain_entry(trained_with, other.spec)
    assert retrain_entry(trained_with, task(loss=smoothed).spec) == {
        "task-functions": {"loss": f"{__name__}:smoothed", "metric": None, "metric-names": []}}
    assert retrain_entry({}, task().spec) is None  # a plain task's store (or one from before): nothing to record
    assert retrain_entry({}, task(metric=accuracy_metric).spec) == manifest_entry(task(metric=accuracy_metric).spec)
    with pytest.raises(ConfigError, match="trained with Task\\(loss=None\\)"):
        retrain_entry({}, task(loss=smoothed).spec)
