"""Check a ``--run-config`` string before Flower sees it, so a typo fails in a second with one line
instead of after starting a SuperLink run."""

from __future__ import annotations

import re
from collections.abc import Mapping

from fedforget.core.config import RENAMED, ConfigError, parse_run_config, warn_renamed
from fedforget.inprocess import default_run_config
from fedforget.methods.registry import method_entry

#: A ``key=value`` pair as ``flwr run`` finds them (flwr.common.config.parse_config_args): what it skips
#: between pairs is dropped without a word, so it is refused here.
FLWR_PAIR = re.compile(r"(\S+?)=(\'[^\']*\'|\"[^\"]*\"|\S+)")


def refuse_skipped_text(text: str) -> None:
    """Raise :class:`ConfigError` for anything ``flwr run`` would drop silently: ``lr=`` with no value, a
    bare word between pairs."""
    for leftover in FLWR_PAIR.sub(" ", text).split():
        key = leftover.split("=", 1)[0]
        if leftover.endswith("=") and key:
            raise ConfigError(f"run-config {key!r} has no value; give it one ({key}=...) or leave it out "
                              "for its default")
        raise ConfigError(f"--run-config holds {leftover[:80]!r}, which is not a key=value pair; "
                          "e.g. \"task='digits-mlp' chains.groups=5\"")


def parse_flwr_run_config(text: str) -> dict[str, object]:
    """``k=v k2="s"`` as ``flwr run --run-config`` reads it (TOML values, space separated)."""
    from flwr.common.config import parse_config_args

    if not text.strip():
        return {}
    if not text.strip().endswith(".toml"):  # a TOML file's path: flwr reads the file
        refuse_skipped_text(text)
    try:
        parsed = dict(parse_config_args([text]))
    except (ValueError, TypeError, OSError) as exc:  # tomli's TOMLDecodeError is a ValueError
        raise ConfigError(f"--run-config is not key=value TOML ({' '.join(str(exc).split())[:200]}); "
                          "e.g. \"task='digits-mlp' chains.groups=5\"") from None
    if not parsed:
        raise ConfigError(f"--run-config {text[:80]!r} has no key=value pair; "
                          "e.g. \"task='digits-mlp' chains.groups=5\"")
    return parsed


def check_run_config(text: str, app_config: Mapping[str, object] | None = None, declared_in: str = "") -> str:
    """Raise :class:`ConfigError` (one line) for an unknown key or a bad value; return the text to submit
    (flat names of grouped keys renamed to the grouped keys, which ``flwr run`` alone accepts). ``app_config``:
    a user app's ``[tool.flwr.app.config]`` (from ``declared_in``), which the overrides go on top of and which
    must declare every key they set (Flower refuses any other, without naming it)."""
    overrides = parse_flwr_run_config(text)
    for key, value in overrides.items():
        if isinstance(value, dict):
            raise ConfigError(f"run-config {key!r} must be a plain value, not a table")
    if app_config is not None:
        undeclared = sorted(k for k in overrides if RENAMED.get(k, k) not in app_config)
        if undeclared:
            raise ConfigError(f"run-config {undeclared[0]!r} is not declared in [tool.flwr.app.config] of "
                              f"{declared_in or 'the app'}; declare it there (Flower refuses a key the app does "
                              "not declare)")
    cfg = parse_run_config({**default_run_config(), **(app_config or {}), **overrides}, warn=False)  # one line
    method = method_entry(cfg.method)
    if method.submit_check:  # what the ServerApp would refuse only once it has the task's data
        method.submit_check(cfg)
    if not set(overrides) & set(RENAMED):
        return text
    warn_renamed(overrides)
    from fedforget.unlearning.retrain import toml_value

    return " ".join(f"{RENAMED.get(k, k)}={toml_value(v)}" for k, v in overrides.items())
