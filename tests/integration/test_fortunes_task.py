"""The many-class text task: Debian's fortunes, one class per category file, a fixed split, MiniLM inputs."""

from __future__ import annotations

import torch

from fedforget.core.config import RunConfig
from fedforget.tasks.registry import load_task_data


def test_fortunes_task_has_one_class_per_category_and_a_run_independent_split():
    from fedforget.tasks.fortunes import fortune_rows

    texts, labels, categories = fortune_rows()
    assert len(categories) >= 40 and len(texts) > 14000 and set(labels.tolist()) == set(range(len(categories)))
    one = load_task_data(RunConfig(task="fortunes-minilm", train_size=200, test_size=50, seed=1))
    two = load_task_data(RunConfig(task="fortunes-minilm", train_size=200, test_size=50, seed=9))
    assert one.num_classes == len(categories)
    assert torch.equal(one.train.inputs[0], two.train.inputs[0]) and torch.equal(one.train.labels, two.train.labels)
    assert len(set(one.train.labels.tolist())) > 20  # many classes present even in a small sample
