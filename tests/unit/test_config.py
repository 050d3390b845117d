import pytest

from fedforget.core.config import METHODS, ConfigError, RunConfig, parse_run_config, sample_clients
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
    from fedforget.core.defaults import default_for, method_defaults

    key, value = next(iter(method_defaults("fedsgt").variants["fedsgt"].items()))
    assert default_for(key, "fedsgt", "digits-mlp") == value


def test_pair_defaults_take_precedence_over_method_defaults():
    """The split methods' pair on rt-smollm runs fewer rounds than the method elsewhere; SAFE's per-task
    class groups come from its package."""
    from fedforget.core.defaults import default_for

    assert default_for("num-rounds", "hosfl", "digits-mlp") == 150
    assert default_for("num-rounds", "hosfl", "rt-smollm") == 60
    assert (default_for("fine", "safe", "rt-minilm"), default_for("adapter-width", "safe", "rt-minilm")) == (1, 384)
    assert default_for("fine", "protosisa", "rt-minilm") == 1


def test_a_method_without_defaults_takes_the_tasks():
    from fedforget.core.defaults import TASK_DEFAULTS, default_for

    assert default_for("lr", "fedavg", "digits-mlp") == TASK_DEFAULTS["digits-mlp"]["lr"]
    assert default_for("lr", "no-such-method", "digits-mlp") == TASK_DEFAULTS["digits-mlp"]["lr"]


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


def test_head_only_needs_a_method_that_declares_it():
    """A linear probe is what a method declares it can run (``Method.head_only``); the refusal names it."""
    from fedforget.methods.registry import FAMILIES

    assert [v for m in FAMILIES if m.head_only for v in m.variants] == ["fedavg"]
    assert parse_run_config({"method": "fedavg", "task": "digits-mlp", "head-only": True}).head_only
    with pytest.raises(ConfigError) as refused:
        parse_run_config({"method": "sisa", "task": "digits-mlp", "head-only": True})
    assert str(refused.value) == "head-only=true (a linear probe) needs method='fedavg', got 'sisa'"


def test_ints_are_accepted_for_floats():
    assert parse_run_config({"lr": 1}).lr == 1.0


def test_client_sampling_is_seeded_and_sized_by_fraction():
    parts = list(range(10))
    assert sample_clients(parts, 1.0, 3) == parts
    chosen = sample_clients(parts, 0.3, 3)
    assert len(chosen) == 3 and chosen == sorted(chosen)
    assert chosen == sample_clients(list(reversed(parts)), 0.3, 3)
    assert any(sample_clients(parts, 0.3, s) != chosen for s in range(4, 10))


def test_every_method_can_retrain_and_an_unknown_action_is_refused():
    for method in METHODS:
        assert parse_run_config({"method": method, "task": "digits-mlp", "action": "retrain"}).action == "retrain"
    with pytest.raises(ConfigError, match="action"):
        parse_run_config({"method": "hosfl", "task": "digits-mlp", "action": "unlearn"})


def test_pyproject_tables_hold_exactly_the_config_groups():
    """The TOML tables users edit and the groups the parser enforces must not drift apart."""
    import tomllib

    from fedforget.core.config import CONFIG_GROUPS
    from fedforget.inprocess import PYPROJECT

    tables = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["flwr"]["app"]["config"]
    found = {name: tuple(f"{name}.{k}" for k in value) for name, value in tables.items() if isinstance(value, dict)}
    assert found == CONFIG_GROUPS


def test_default_run_config_has_flowers_dotted_keys():
    """``flwr run`` flattens tables into dotted keys; the in-process runtime must start from the same dict."""
    from flwr.common.config import flatten_dict

    config = default_run_config()
    assert config["safe.coarse"] == 4 and config["chains.groups"] == 10 and "coarse" not in config
    assert flatten_dict({"safe": {"coarse": 8}}) == {"safe.coarse": 8}


def test_a_dotted_command_line_key_parses_like_flowers_run_config():
    """``--run-config "safe.coarse=8"`` reaches the ServerApp as the key ``safe.coarse``."""
    from flwr.common.config import parse_config_args

    overrides = parse_config_args(["method='safe' safe.coarse=8 hosfl.client-lr=0.0"])
    assert overrides == {"method": "safe", "safe.coarse": 8, "hosfl.client-lr": 0.0}
    assert parse_run_config({**default_run_config(), "method": "safe", "safe.coarse": 8}).safe.coarse == 8


def test_grouped_keys_parse_into_their_groups_typed_objects():
    """Grouped keys fill the typed object of their group (``cfg.safe``), which the strategies read."""
    cfg = parse_run_config({**default_run_config(), "method": "safe", "safe.dp": True, "safe.schedule": "constant",
                            "safe.shard": 0, "safe.fine": 2})
    assert (cfg.safe.dp, cfg.safe.schedule, cfg.safe.fine) == (True, "constant", 2)
    cfg = parse_run_config({**default_run_config(), "method": "fedshard", "fedshard.fanout": 3})
    assert cfg.fedshard.fanout == 3


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"method": "fedavg", "chains.groups": 4}, "reads the common keys only"),
        ({"method": "fedsgt", "safe.coarse": 2}, "chains.groups, chains.budget"),
        ({"method": "safe", "hosfl.cut": 2}, "safe.coarse, safe.fine"),
        ({"method": "hosfl", "task": "digits-mlp", "fedshard.fanout": 3}, "hosfl.cut, hosfl.perturbations"),
        ({"method": "fedshard", "chains.prior": "1"}, "fedshard.fanout"),
    ],
)
def test_a_key_of_another_method_that_differs_from_its_default_is_refused_naming_the_methods_keys(override, named):
    """Flower passes every default, so only a changed value means the user set a key the method ignores."""
    with pytest.raises(ConfigError, match=r"does not apply to method") as err:
        parse_run_config({**default_run_config(), **override})
    assert named in str(err.value) and "\n" not in str(err.value)


def test_a_key_of_another_method_left_at_its_default_is_accepted():
    """Every pyproject default arrives with each run; it must not trip the check."""
    assert parse_run_config({**default_run_config(), "method": "fedavg", "chains.groups": 10}).method == "fedavg"


def test_an_hf_key_with_a_built_in_task_is_refused():
    """The hf table only applies to task='hf'."""
    with pytest.raises(ConfigError, match=r"'hf.model' applies to task='hf' only"):
        parse_run_config({**default_run_config(), "hf.model": "bert-base-uncased"})


@pytest.mark.parametrize("method", ["fedavg", "fedsgt", "s3t", "sisa", "fedcio", "fedshard", "safe", "protosisa",
                                    "hosfl", "sfl", "zo-sfl"])
def test_each_methods_default_config_round_trips_through_its_manifest_dict(method):
    """A store's manifest holds ``to_dict()``; re-reading it (retrain, verify) must give the same config,
    including auto keys resolved for another family's group."""
    cfg = parse_run_config({**default_run_config(), "method": method, "task": "digits-mlp"})
    assert parse_run_config(cfg.to_dict()) == cfg


def test_a_flat_key_is_accepted_under_its_grouped_name_with_one_warning_line(capsys):
    """A flat name is still read, and one line says which grouped key to use instead."""
    from fedforget.core import config

    config._WARNED.discard("coarse")
    cfg = parse_run_config({**default_run_config(), "method": "safe", "coarse": 2})
    assert cfg.safe.coarse == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'coarse' is now 'safe.coarse'" in err[0]


def test_a_flat_and_a_grouped_key_with_different_values_are_refused():
    """Two different values for one setting cannot both be meant."""
    with pytest.raises(ConfigError, match="name the same key"):
        parse_run_config({**default_run_config(), "method": "safe", "coarse": 2, "safe.coarse": 3})


def _flat_manifest_config(cfg: RunConfig) -> dict[str, object]:
    """A manifest config with every key flat (stores written without groups)."""
    from fedforget.core.config import RENAMED

    old_name = {new: old for old, new in RENAMED.items()}
    return {old_name.get(k, k): v for k, v in cfg.to_dict().items()}


def test_a_stored_flat_key_manifest_loads_with_its_values():
    """Stores written with flat keys must still load for status, forget, retrain and verify."""
    from fedforget.core.config import stored_run_config

    trained = RunConfig(method="fedsgt", task="digits-mlp").with_keys({"chains.groups": 4, "chains.budget": 3})
    upgraded = stored_run_config(_flat_manifest_config(trained))
    assert upgraded["chains.groups"] == 4 and "groups" not in upgraded
    assert not any(k.startswith(("safe.", "hosfl.", "fedshard.", "hf.")) for k in upgraded)
    assert parse_run_config(upgraded) == trained


def test_a_stored_key_the_method_never_read_is_dropped_on_load():
    """An old store may carry a changed key its method ignored; it took no part in the run and must not
    make the store unreadable."""
    from fedforget.core.config import stored_run_config

    stored = {**_flat_manifest_config(RunConfig(method="fedavg", task="digits-mlp")), "groups": 7}
    assert parse_run_config(stored_run_config(stored)).chains.groups == 10


def test_every_key_is_declared_once_and_every_renamed_key_names_a_grouped_key():
    """Each key is one field of one table; the old flat names, declared on the fields, cover each grouped key
    that had one once (a group added after the flat names went, such as ``replay``, has none at all)."""
    from fedforget.core.config import CONFIG_GROUPS, RENAMED, TABLES, declared_defaults

    keys = [cls.key(f.name) for cls in (RunConfig, *TABLES.values()) for f in cls.options()]
    assert len(keys) == len(set(keys)) == len(declared_defaults())
    renamed = set(RENAMED.values())
    assert all(set(group) <= renamed or not set(group) & renamed for group in CONFIG_GROUPS.values())
    assert sorted(RENAMED.values()) == sorted(k for group in CONFIG_GROUPS.values() for k in group if k in renamed)
    assert set(RENAMED.values()) <= set(keys)
    assert len(RENAMED) == len(set(RENAMED.values()))


def test_a_config_holds_every_groups_typed_object_and_nothing_else_by_name():
    """``cfg.<group>`` is that group's object, at its defaults when not given; a flat method attribute
    is no longer there."""
    from fedforget.core.config import TABLES

    cfg = RunConfig(method="fedavg", task="digits-mlp")
    assert [t.group for t in cfg.tables] == list(TABLES)
    assert all(isinstance(getattr(cfg, g), cls) for g, cls in TABLES.items())
    assert cfg.value("safe.coarse") == cfg.safe.coarse == 4
    with pytest.raises(AttributeError):
        _ = cfg.coarse
    changed = cfg.with_keys({"safe.coarse": 8, "num-rounds": 3})
    assert (changed.safe.coarse, changed.num_rounds, cfg.safe.coarse) == (8, 3, 4)


def test_method_groups_cover_every_method():
    """Each method names its group (or none), so the check knows what it reads."""
    from fedforget.core.config import CONFIG_GROUPS, METHOD_GROUP, METHODS

    assert set(METHOD_GROUP) == set(METHODS)
    assert {g for g in METHOD_GROUP.values() if g} <= set(CONFIG_GROUPS)


def test_the_packaged_defaults_equal_the_pyproject_app_config_key_for_key_and_type_for_type():
    """An installed copy reads its defaults from the package; the checkout's pyproject must say the same."""
    import tomllib

    from flwr.common.config import flatten_dict

    from fedforget.inprocess import PYPROJECT

    declared = dict(flatten_dict(tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["flwr"]["app"]["config"]))
    packaged = default_run_config()
    assert list(packaged) == list(declared)
    assert {k: (v, type(v)) for k, v in packaged.items()} == {k: (v, type(v)) for k, v in declared.items()}
