"""A task's own train step: the loop calls it once per batch with its own batches, order and optimizer (a step that
does what the loop does trains the loop's bits), seeds torch's global stream before each call so a step's draws
repeat, and restores that stream after; what a step returns is checked; a task gives a loss or a step; each method's
declaration (and FedProx's configuration) says whether it takes one, and one that does not refuses in one line
naming the methods that do; the store records the step and a retrain refuses another."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from flwr.serverapp.strategy import FedAvg, FedProx
from torch import nn

from fedforget.client import Task
from fedforget.core.config import ConfigError
from fedforget.methods.registry import BY_VARIANT, FAMILIES
from fedforget.strategies import Forgettable
from fedforget.tasks.task_functions import check_task_functions, manifest_entry, refuse_train_step, retrain_entry
from fedforget.training.supervised import TrainSettings, train_supervised

#: the methods whose nodes train by train_supervised, and those whose training cannot take a task's step
TAKES_STEP = {"fedavg", "replay", "fedshard", "sisa", "fedcio", "fedsgt", "s3t"}
REFUSES_STEP = {"safe", "protosisa", "hosfl", "sfl", "zo-sfl"}
BASE = TrainSettings(epochs=2, batch_size=8, lr=0.05, optimizer="sgd", seed=7)


def loops_own_step(model: nn.Module, inputs: tuple[torch.Tensor, ...], labels: torch.Tensor,
                   optimizer: torch.optim.Optimizer) -> torch.Tensor:
    """What the loop does with a batch itself (fedforget zeroes the gradients before the call)."""
    loss = nn.functional.cross_entropy(model(*inputs), labels)
    loss.backward()
    optimizer.step()
    return loss


def noisy_clipped_step(model: nn.Module, inputs: tuple[torch.Tensor, ...], labels: torch.Tensor,
                       optimizer: torch.optim.Optimizer) -> torch.Tensor:
    """Augmentation drawn from torch's global stream, dropout, and gradient clipping."""
    noisy = nn.functional.dropout(inputs[0] + 0.1 * torch.randn_like(inputs[0]), p=0.2)
    loss = nn.functional.cross_entropy(model(noisy), labels)
    loss.backward()
    nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=0.1)
    optimizer.step()
    return loss


def trained(settings: TrainSettings) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    gen = torch.Generator().manual_seed(1)
    inputs, labels = torch.randn(40, 4, generator=gen), torch.randint(0, 3, (40,), generator=gen)
    train_supervised(model, (inputs,), labels, settings)
    return [p.detach().clone() for p in model.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def with_step(step: object, **changes: object) -> TrainSettings:
    return dataclasses.replace(BASE, train_step=step, **changes)


def task(**functions: object) -> Task:
    return Task(name="mine", backbone=lambda: nn.Sequential(nn.Linear(4, 8)), feature_dim=8, lora_targets=["0"],
                num_classes=3, **functions)


def test_a_step_that_does_what_the_loop_does_trains_the_loops_bits():
    assert same(trained(with_step(loops_own_step)), trained(BASE))
    adam = dataclasses.replace(BASE, optimizer="adam")
    assert same(trained(dataclasses.replace(adam, train_step=loops_own_step)), trained(adam))


def test_a_steps_random_draws_repeat_for_the_same_unit_and_differ_for_another():
    once = trained(with_step(noisy_clipped_step))
    assert same(once, trained(with_step(noisy_clipped_step)))
    assert not same(once, trained(BASE))
    assert not same(once, trained(with_step(noisy_clipped_step, seed=8)))


def test_each_step_draws_from_a_stream_seeded_by_the_unit_and_step_and_the_callers_stream_is_left_as_it_was():
    draws: list[torch.Tensor] = []

    def drawing_step(model, inputs, labels, optimizer):  # noqa: ANN001, ANN202
        draws.append(torch.rand(3))
        return loops_own_step(model, inputs, labels, optimizer)

    trained(with_step(drawing_step))
    first = list(draws)
    assert len(first) == 10 and len({tuple(d.tolist()) for d in first}) == 10  # 2 epochs × 5 batches, each its own
    draws.clear()
    torch.manual_seed(999)  # whatever the caller's stream holds, the steps draw the same
    trained(with_step(drawing_step))
    assert all(torch.equal(a, b) for a, b in zip(first, draws, strict=True))
    model = nn.Linear(4, 3)
    torch.manual_seed(5)
    expected = torch.get_rng_state()
    train_supervised(model, (torch.zeros(8, 4),), torch.zeros(8, dtype=torch.long), with_step(drawing_step))
    assert torch.equal(torch.get_rng_state(), expected)  # the global stream as it was before the loop


def test_the_gradients_are_zeroed_before_each_step():
    seen: list[bool] = []

    def looking_step(model, inputs, labels, optimizer):  # noqa: ANN001, ANN202
        seen.append(all(p.grad is None for p in model.parameters()))
        return loops_own_step(model, inputs, labels, optimizer)

    trained(with_step(looking_step))
    assert seen and all(seen)


@pytest.mark.parametrize(("returned", "shown"), [
    (None, "returned None"), (torch.ones(8), "returned a tensor of shape (8,)"), (float("nan"), "returned nan"),
    (torch.tensor(float("inf")), "returned tensor(inf)"), (True, "returned True"), ("0.5", "returned '0.5'")])
def test_a_step_that_returns_no_finite_number_or_scalar_tensor_is_one_error_naming_it(returned, shown):
    def bad_step(model, inputs, labels, optimizer):  # noqa: ANN001, ANN202
        loops_own_step(model, inputs, labels, optimizer)
        return returned

    with pytest.raises(ValueError, match="bad_step") as caught:
        trained(with_step(bad_step))
    line = str(caught.value)
    assert shown in line and "must return the batch's loss as a finite number or a scalar tensor" in line
    assert "\n" not in line


def test_a_step_returning_a_plain_number_trains():
    def number_step(model, inputs, labels, optimizer):  # noqa: ANN001, ANN202
        return float(loops_own_step(model, inputs, labels, optimizer).detach())

    assert same(trained(with_step(number_step)), trained(BASE))


def test_a_method_term_of_the_loss_cannot_ride_on_a_step():
    with pytest.raises(ValueError, match="computes its own loss, which would hide the method's own term"):
        trained(with_step(loops_own_step, proximal_mu=0.1))
    with pytest.raises(ValueError, match="which would hide"):
        trained(with_step(loops_own_step, loss_term=lambda logits, labels, params: logits.sum()))


def test_a_task_gives_a_loss_or_a_step_and_a_step_is_a_function():
    with pytest.raises(ValueError, match=r"give Task\(loss=...\) or Task\(train_step=...\), not both"):
        task(loss=nn.functional.cross_entropy, train_step=loops_own_step)
    with pytest.raises(TypeError, match=r"Task\(train_step=...\) must be a function"):
        task(train_step="sgd")
    assert task(train_step=loops_own_step).spec.train_step is loops_own_step
    assert task().spec.train_step is None


def test_every_method_declares_whether_its_training_takes_a_tasks_step():
    declared = {v: m.refuses_train_step is None for m in FAMILIES for v in m.variants}
    assert {v for v, takes in declared.items() if takes} == TAKES_STEP
    assert {v for v, takes in declared.items() if not takes} == REFUSES_STEP


@pytest.mark.parametrize("variant", sorted(REFUSES_STEP))
def test_a_method_that_takes_no_step_refuses_a_task_with_one_in_one_line_naming_the_methods_that_do(variant):
    method = BY_VARIANT[variant]
    with pytest.raises(ConfigError) as caught:
        check_task_functions(method, variant, task(train_step=loops_own_step).spec, method.refuses_train_step)
    line = str(caught.value)
    assert line.startswith(f"method {variant!r} does not train with a task's own train step: "
                           f"{method.refuses_train_step}; drop Task(train_step=...) or use a method that takes it (")
    assert all(v in line for v in TAKES_STEP) and "\n" not in line
    check_task_functions(method, variant, task().spec, method.refuses_train_step)  # a task without a step runs


@pytest.mark.parametrize("variant", sorted(TAKES_STEP))
def test_a_method_that_trains_by_the_supervised_loop_takes_the_tasks_step(variant):
    method = BY_VARIANT[variant]
    assert check_task_functions(method, variant, task(train_step=loops_own_step).spec, method.refuses_train_step) == []


def test_forgettable_takes_a_step_except_under_fedproxs_proximal_term():
    for strategy in (FedAvg(), "fedavgm", "fedadam", None, FedProx(proximal_mu=0.0)):
        assert Forgettable(strategy).train_step_refusal() is None
    for strategy in ("fedprox", FedProx(proximal_mu=0.5)):
        refusal = Forgettable(strategy).train_step_refusal()
        assert refusal is not None and refusal.startswith("FedProx adds its proximal term")
        with pytest.raises(ConfigError, match="method 'replay' does not train with a task's own train step: FedProx "
                                              r".*build it with FedAvg \(strategy='fedavg'\)"):
            refuse_train_step("replay", task(train_step=loops_own_step).spec, refusal)


def test_the_manifest_names_the_step_and_a_retrain_refuses_another():
    entry = manifest_entry(task(train_step=noisy_clipped_step).spec)
    assert entry == {"task-functions": {"loss": None, "metric": None, "metric-names": [],
                                        "train-step": f"{__name__}:noisy_clipped_step"}}
    assert "train-step" not in manifest_entry(task(loss=nn.functional.cross_entropy).spec)["task-functions"]
    assert retrain_entry(entry, task(train_step=noisy_clipped_step).spec) is None
    for other in (task(), task(train_step=loops_own_step)):
        with pytest.raises(ConfigError, match=f"trained with Task\\(train_step={__name__}:noisy_clipped_step\\)"):
            retrain_entry(entry, other.spec)
    with pytest.raises(ConfigError, match="trained with Task\\(train_step=None\\)"):
        retrain_entry({}, task(train_step=noisy_clipped_step).spec)


def test_the_train_step_docs_your_app_shows_works_as_shown():
    page = (Path(__file__).resolve().parents[2] / "docs" / "your-app.md").read_text(encoding="utf-8")
    block = next(b for b in page.split("```python\n")[1:] if "def clipped_step" in b).split("```")[0]
    code = "\n".join(line for line in block.splitlines() if not line.startswith("TASK = "))
    namespace: dict[str, object] = {}
    exec(code, namespace)  # noqa: S102 - the page's own snippet
    step = namespace["clipped_step"]
    assert same(trained(with_step(step)), trained(with_step(step)))
    assert not same(trained(with_step(step)), trained(BASE))
