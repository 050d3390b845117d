"""Task name → how to load it; the one place that knows every task."""

from __future__ import annotations

from fedforget.core.config import RunConfig, is_user_task
from fedforget.tasks.base import TaskData, TaskSpec
from fedforget.tasks.builtin_vision import DIGITS_MLP, FMNIST_CNN
from fedforget.tasks.data_access import require_training_rows
from fedforget.tasks.digits_permuted import DIGITS_MLP_PERM, DIGITS_MLP_PERM_VAL
from fedforget.tasks.digits_validation import DIGITS_MLP_VAL
from fedforget.tasks.effnet import FMNIST_EFFNET
from fedforget.tasks.fortunes import FORTUNES_MINILM
from fedforget.tasks.hf_generic import HF_GENERIC
from fedforget.tasks.partitioning import PartitionPlan, plan_partitions
from fedforget.tasks.smollm import RT_SMOLLM, RT_SMOLLM_VAL
from fedforget.tasks.text import RT_MINILM
from fedforget.tasks.user_task import Task

#: Every shipped task, defined with the public :class:`fedforget.client.Task` as a user's task is.
TASKS: dict[str, Task] = {
    task.name: task
    for task in (DIGITS_MLP, FMNIST_CNN, FMNIST_EFFNET, RT_MINILM, HF_GENERIC, RT_SMOLLM, FORTUNES_MINILM,
                 DIGITS_MLP_VAL, RT_SMOLLM_VAL, DIGITS_MLP_PERM, DIGITS_MLP_PERM_VAL)
}


def get_task(name: str) -> TaskSpec:
    """The loaded form of a shipped task by name, or of a user task by its ``"<module>:<ATTRIBUTE>"`` reference
    (imported on first use): what :attr:`Task.spec` builds for either."""
    if is_user_task(name):
        from fedforget.tasks.user_task import load_user_task

        return load_user_task(name)
    try:
        return TASKS[name].spec
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(sorted(TASKS))}") from None


def _data_key(cfg: RunConfig) -> tuple[object, ...]:
    return (cfg.task, cfg.train_size, cfg.test_size, cfg.hf.dataset, cfg.hf.model, cfg.hf.input_column,
            cfg.hf.label_column)


_DATA: dict[tuple[object, ...], TaskData] = {}
_PLANS: dict[tuple[object, ...], PartitionPlan] = {}


def load_task_data(cfg: RunConfig) -> TaskData:
    """The task's train pool and test split (cached per process; loading is deterministic).

    A node's read: refused in the serving role (:mod:`fedforget.tasks.data_access`)."""
    require_training_rows(f"loading {cfg.task}'s training pool")
    key = _data_key(cfg)
    if key not in _DATA:
        _DATA.clear()  # one task per process at a time; keeps memory flat in long-lived Ray actors
        _DATA[key] = get_task(cfg.task).load_data(cfg)
    return _DATA[key]


def partition_plan(cfg: RunConfig, num_partitions: int) -> PartitionPlan:
    """Which global ids each partition and slice holds, drawn over the whole public pool on a node."""
    require_training_rows(f"partitioning {cfg.task}'s training pool")
    key = (*_data_key(cfg), num_partitions, cfg.partitioner, cfg.dirichlet_alpha, cfg.slices_per_client, cfg.seed)
    if key not in _PLANS:
        train = load_task_data(cfg).train
        _PLANS[key] = plan_partitions(
            train.labels.numpy(), train.ids.numpy(), num_partitions, cfg.partitioner, cfg.dirichlet_alpha,
            cfg.slices_per_client, cfg.seed,
        )
    return _PLANS[key]
