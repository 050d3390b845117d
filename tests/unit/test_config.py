import pytest

from fedforget.core.config import ConfigError, RunConfig, parse_run_config, sample_clients
from fedforget.inprocess import default_run_config


def test_pyproject_defaults_parse_to_the_dataclass_defaults_keys():
    cfg = parse_run_config(default_run_config())
    assert set(cfg.to_dict()) == set(default_run_config())
    assert cfg.method == "fedavg"


def test_pyproject_defaults_equal_the_dataclass_defaults():
    assert RunConfig().to_dict() == parse_run_config(default_run_config()).to_dict()


def test_keys_left_at_zero_take_the_task_and_method_defaults():
    cfg = parse_run_config({**default_run_config(), "task": "digits-mlp"})
    assert (cfg.num_rounds, cfg.local_epochs, cfg.lr) == (10, 2, 0.02)
    assert cfg.lora_alpha == 2 * cfg.lora_r


def test_a_users_value_overrides_the_task_default_and_alpha_follows_a_given_rank():
    cfg = parse_run_config({**default_run_config(), "task": "digits-mlp", "lr": 0.5, "lora-r": 3})
    assert (cfg.lr, cfg.lora_r, cfg.lora_alpha, cfg.num_rounds) == (0.5, 3, 6, 10)


def test_method_defaults_take_precedence_over_task_defaults():
    from fedforget.core.defaults import METHOD_DEFAULTS, default_for

    key, value = next(iter(METHOD_DEFAULTS["fedsgt"].items()))
    assert default_for(key, "fedsgt", "digits-mlp") == value


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"task": "cifar"}, "'task'='cifar' is not one of"),
        ({"method": "magic"}, "'method'='magic' is not one of"),
        ({"num-rounds": -1}, "'num-rounds' must be >= 1"),
        ({"num-rounds": "five"}, "'num-rounds' must be int"),
        ({"lr": -1.0}, "'lr' must be > 0"),
        ({"fraction-train": 1.5}, "'fraction-train' must be in"),
        ({"store": " "}, "'store' must be a directory"),
        ({"task": "hf"}, "needs run-config 'hf.dataset'"),
        ({"bogus-key": 1}, "unknown run-config key"),
        ({"seed": True}, "'seed' must be int"),
    ],
)
def test_bad_values_raise_a_config_error_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        parse_run_config({**default_run_config(), **override})


def test_ints_are_accepted_for_floats():
    assert parse_run_config({"lr": 1}).lr == 1.0


def test_client_sampling_is_seeded_and_sized_by_fraction():
    parts = list(range(10))
    assert sample_clients(parts, 1.0, 3) == parts
    chosen = sample_clients(parts, 0.3, 3)
    assert len(chosen) == 3 and chosen == sorted(chosen)
    assert chosen == sample_clients(list(reversed(parts)), 0.3, 3)
    assert any(sample_clients(parts, 0.3, s) != chosen for s in range(4, 10))


def test_retrain_is_refused_for_methods_without_exact_unlearning():
    with pytest.raises(ConfigError, match="cannot retrain"):
        parse_run_config({"method": "hosfl", "task": "digits-mlp", "action": "retrain"})
    assert parse_run_config({"method": "fedsgt", "action": "retrain"}).action == "retrain"
