"""A task variant (validation or permuted rows) splits the model of the task it was cut from, with the
same blocks and the same deepest cut; a task without a split model is refused."""

from __future__ import annotations

import pytest

from fedforget.core.config import ConfigError, model_task, parse_run_config
from fedforget.methods.hosfl.split_model import build_split_model


@pytest.mark.parametrize("variant", ["digits-mlp-val", "digits-mlp-perm", "digits-mlp-perm-val"])
def test_a_variant_splits_its_tasks_model_at_the_same_cut(variant):
    base = build_split_model(parse_run_config({"method": "hosfl", "task": "digits-mlp", "hosfl.cut": 2}), 10)
    split = build_split_model(parse_run_config({"method": "hosfl", "task": variant, "hosfl.cut": 2}), 10)
    assert model_task(variant) == "digits-mlp"
    assert split.client_names == base.client_names
    assert [p.shape for _, p in split.client_params] == [p.shape for _, p in base.client_params]


def test_a_variant_keeps_its_tasks_deepest_cut_and_a_task_without_a_split_model_is_refused():
    with pytest.raises(ConfigError, match=r"too deep for task 'digits-mlp-perm': use 1\.\.2"):
        parse_run_config({"method": "hosfl", "task": "digits-mlp-perm", "hosfl.cut": 3})
    with pytest.raises(ConfigError, match="needs a split model; use task one of: .*digits-mlp-perm-val"):
        parse_run_config({"method": "hosfl", "task": "fmnist-effnet"})
