"""A task's own prediction (``Task(prediction=...)``): it reads the served logits (the log of the served class
probabilities, whose softmax is what is served), its outputs are checked (one number or row of numbers per record),
the task's metric reads them in place of the probabilities while accuracy and loss stay as they were, a task
without one evaluates exactly as before, a failing one is refused before the run in one line, the store names it,
and the forget service's answer carries its outputs only for a task that has one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fedforget.client import Task
from fedforget.core.config import ConfigError
from fedforget.federation.serve import class_probabilities, probability_metrics
from fedforget.methods.registry import BY_VARIANT
from fedforget.service.predict import PredictionError
from fedforget.tasks.task_functions import (
    check_task_functions,
    manifest_entry,
    prediction_outputs,
    probe_metric,
    retrain_entry,
    served_logits,
)

PROBS = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.45, 0.35, 0.2]])
LABELS = torch.tensor([0, 1, 1, 0])


def make_backbone() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8))


def task(**functions: object) -> Task:
    return Task(name="mine", backbone=make_backbone, feature_dim=8, lora_targets=["0"], num_classes=3, **functions)


def confident_label(logits: torch.Tensor) -> torch.Tensor:
    """The class, or -1 where the served model gives it less than a half."""
    probabilities = torch.softmax(logits, dim=1)
    return torch.where(probabilities.max(1).values >= 0.5, probabilities.argmax(1), -1)


def top2(logits: torch.Tensor) -> torch.Tensor:
    return logits.topk(2, dim=1).indices


def covered(outputs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    answered = outputs >= 0
    hits = (outputs == labels)[answered]
    return {"coverage": float(answered.mean()), "selective-accuracy": float(hits.mean()) if len(hits) else 0.0}


def argmax_metric(probabilities: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    return {"hits": float((probabilities.argmax(1) == labels).mean())}


def test_the_served_logits_are_logits_whose_softmax_is_what_is_served():
    logits = served_logits(PROBS)
    assert logits.dtype == torch.float64 and logits.shape == PROBS.shape
    assert np.allclose(torch.softmax(logits, dim=1).numpy(), PROBS, rtol=0, atol=1e-15)
    model_logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0]])  # one model: its own, less the log-sum-exp
    own = served_logits(class_probabilities(model_logits))
    expected = model_logits.double() - torch.logsumexp(model_logits.double(), dim=1, keepdim=True)
    assert torch.allclose(own, expected, rtol=0, atol=1e-12)
    assert torch.equal(own.argmax(1), model_logits.argmax(1)) and torch.equal(top2(own), top2(model_logits))
    underflowed = served_logits(np.array([[1.0, 0.0]]))  # a probability that underflowed is a finite logit
    assert torch.isfinite(underflowed).all() and underflowed[0, 1] < -700


def test_the_metric_reads_the_predictions_outputs_and_accuracy_and_loss_stay_as_they_were():
    plain = probability_metrics(PROBS, LABELS)
    with_outputs = probability_metrics(PROBS, LABELS, covered, confident_label)
    assert with_outputs == {**plain, "coverage": 0.5, "selective-accuracy": 1.0}
    # without a prediction the metric reads the probabilities, as it always did
    assert probability_metrics(PROBS, LABELS, argmax_metric) == {**plain, "hits": 0.75}
    # a prediction with no metric changes nothing that is reported
    assert probability_metrics(PROBS, LABELS, None, confident_label) == plain


def test_a_predictions_outputs_are_one_number_or_row_of_numbers_per_record():
    assert prediction_outputs(confident_label, PROBS).tolist() == [0, 1, -1, -1]
    assert prediction_outputs(top2, PROBS).tolist() == [[0, 1], [1, 0], [2, 0], [0, 1]]
    values = prediction_outputs(lambda z: (torch.softmax(z, 1) * torch.tensor([1.0, 2.0, 3.0])).sum(1), PROBS)
    assert values.dtype == np.float64 and values.shape == (4,)  # a value per record: the expected class number
    assert prediction_outputs(lambda z: z.numpy()[:, 0] > -1, PROBS).dtype == np.bool_  # numpy arrays too


@pytest.mark.parametrize(("prediction", "why"), [
    (lambda z: z[:2], "returned shape \\(2, 3\\) for 4 records"),
    (lambda z: z.sum(), "returned shape \\(\\) for 4 records"),
    (lambda z: np.array(["a"] * len(z)), "returned <U1 values; return numbers"),
    (lambda z: torch.full((len(z),), float("nan")), "a value that is not finite"),
    (lambda z: [[1], [2, 3]], "returned list, not an array")])
def test_a_prediction_that_returns_what_is_not_one_output_per_record_is_one_error_naming_it(prediction, why):
    with pytest.raises(ValueError, match=why) as caught:
        prediction_outputs(prediction, PROBS)
    assert "the task's prediction" in str(caught.value) and "\n" not in str(caught.value)


def test_a_failing_prediction_is_refused_before_the_run_in_one_line_and_the_metric_is_probed_on_its_outputs():
    def broken(logits: torch.Tensor) -> torch.Tensor:
        raise KeyError("oops")

    for spec in (task(prediction=broken).spec, task(prediction=broken, metric=covered).spec):
        with pytest.raises(ConfigError, match="Task\\(prediction=...\\) of task 'mine' fails on uniform logits: "
                                              "KeyError") as caught:
            check_task_functions(BY_VARIANT["fedavg"], "fedavg", spec)
        assert "\n" not in str(caught.value)
    assert probe_metric(task(prediction=confident_label, metric=covered).spec) == ["coverage", "selective-accuracy"]
    # a metric written for probabilities fails on the outputs of a prediction, and says what it was handed
    with pytest.raises(ConfigError, match="takes \\(the prediction's outputs, labels\\)"):
        probe_metric(task(prediction=confident_label, metric=argmax_metric).spec)
    assert check_task_functions(BY_VARIANT["fedavg"], "fedavg", task(prediction=confident_label).spec) == []


def test_a_task_refuses_a_prediction_that_is_not_a_function():
    with pytest.raises(TypeError, match="Task\\(prediction=...\\) must be a function"):
        task(prediction="argmax")


def test_the_manifest_names_the_prediction_only_for_a_task_that_has_one():
    assert manifest_entry(task().spec) == {}
    assert manifest_entry(task(metric=argmax_metric).spec) == {"task-functions": {
        "loss": None, "metric": f"{__name__}:argmax_metric", "metric-names": ["hits"]}}  # as before
    assert manifest_entry(task(prediction=top2).spec) == {"task-functions": {
        "loss": None, "metric": None, "metric-names": [], "prediction": f"{__name__}:top2"}}


def test_a_retrain_records_another_prediction_which_trains_nothing():
    trained_with = manifest_entry(task(prediction=top2).spec)
    assert retrain_entry(trained_with, task(prediction=top2).spec) is None
    assert retrain_entry(trained_with, task(prediction=confident_label).spec) == manifest_entry(
        task(prediction=confident_label).spec)
    assert retrain_entry(trained_with, task().spec) == {"task-functions": {"loss": None, "metric": None,
                                                                           "metric-names": []}}
    assert retrain_entry({}, task(prediction=top2).spec) == trained_with  # a store from before records it
    assert retrain_entry({}, task().spec) is None


def test_the_services_answer_carries_the_outputs_only_for_a_task_with_a_prediction(monkeypatch):
    from fedforget.service import predict

    monkeypatch.setattr("fedforget.tasks.task_functions.task_prediction", lambda cfg: cfg)
    assert predict.task_outputs(None, PROBS) is None
    assert predict.task_outputs(top2, PROBS) == [[0, 1], [1, 0], [2, 0], [0, 1]]
    assert predict.task_outputs(confident_label, PROBS) == [0, 1, -1, -1]  # JSON values: ints stay ints

    def broken(logits: torch.Tensor) -> torch.Tensor:
        raise ZeroDivisionError("no")

    with pytest.raises(PredictionError, match=f"{__name__}:.*broken raised ZeroDivisionError: no"):
        predict.task_outputs(broken, PROBS)
    with pytest.raises(PredictionError, match="returned shape \\(2, 3\\) for 4 records"):
        predict.task_outputs(lambda z: z[:2], PROBS)


def test_the_prediction_docs_your_app_shows_works_as_shown():
    page = (Path(__file__).resolve().parents[2] / "docs" / "your-app.md").read_text(encoding="utf-8")
    block = next(b for b in page.split("```python\n")[1:] if "def confident_label" in b).split("```")[0]
    code = "\n".join(line for line in block.splitlines() if not line.startswith("TASK = "))
    namespace: dict[str, object] = {}
    exec(code, namespace)  # noqa: S102 - the page's own snippet
    spec = task(prediction=namespace["confident_label"], metric=namespace["selective_accuracy"]).spec
    assert check_task_functions(BY_VARIANT["fedavg"], "fedavg", spec) == ["coverage", "selective-accuracy"]
    assert prediction_outputs(spec.prediction, PROBS).tolist() == [0, 1, -1, -1]
    assert probability_metrics(PROBS, LABELS, spec.metric, spec.prediction)["selective-accuracy"] == 1.0
