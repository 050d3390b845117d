"""Figures the user pages state that the code decides: what `make demo` runs (the Makefile's DEMO_CONFIG),
the training defaults per task and SAFE's adapter width per task (core/defaults.py and SAFE's config), and
which commands the CLI has and which take `--store` (the `fedforget` app). Each is read from the page as
written and compared with the code, so the page and the code cannot drift apart."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
import typer

from fedforget.core.defaults import FALLBACK, default_for
from fedforget.methods.registry import FAMILIES  # noqa: F401  (fills the method declarations the defaults read)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def makefile_demo_config(makefile: str) -> dict[str, str]:
    """The run-config keys of the Makefile's ``DEMO_CONFIG ?= ...`` line."""
    line = re.search(r"^DEMO_CONFIG \?= (.+)$", makefile, re.M).group(1)
    return dict(word.split("=", 1) for word in shlex.split(line))


def demo_page_figures(page: str) -> dict[str, int | str]:
    """What the quick start says `make demo` runs: method, training and test images, groups, sequences,
    modules."""
    data = re.search(r"partitions of ([\d,]+) Fashion-MNIST training images \(([\d,]+) test\)", page)
    chains = re.search(r"trains \*\*(\w+)\*\* with (\d+) groups and (\d+) sequences \((\d+) LoRA modules", page)
    assert data and chains, "the quick start no longer states the demo's data and chain sizes"
    return {"train-size": _number(data[1]), "test-size": _number(data[2]), "method": chains[1].lower(),
            "groups": int(chains[2]), "budget": int(chains[3]), "modules": int(chains[4])}


def test_the_quick_start_states_what_make_demo_runs() -> None:
    config = makefile_demo_config((ROOT / "Makefile").read_text(encoding="utf-8"))
    page = demo_page_figures((DOCS / "getting-started.md").read_text(encoding="utf-8"))
    assert config["task"] == "fmnist-cnn"
    assert page == {"train-size": int(config["train-size"]), "test-size": int(config["test-size"]),
                    "method": config["method"], "groups": int(config["chains.groups"]),
                    "budget": int(config["chains.budget"]),
                    "modules": int(config["chains.groups"]) * int(config["chains.budget"])}


def test_a_demo_page_with_other_figures_is_seen() -> None:
    """Negative control: the figures the page used to disagree with are read back as different."""
    page = ("partitions of 3,000 Fashion-MNIST training images (1,000 test) ... trains **FedSGT** with 5 groups "
            "and 5 sequences (25 LoRA modules")
    assert demo_page_figures(page)["train-size"] == 3000 and demo_page_figures(page)["groups"] == 5


def task_defaults_table(page: str) -> dict[str, dict[str, float]]:
    """The run-configuration page's table of training defaults per task: task → key → value."""
    lines = page[page.index("| task | `num-rounds`"):].splitlines()
    keys = [cell.strip(" `") for cell in lines[0].strip("|").split("|")][1:]
    table = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip(" `") for cell in line.strip("|").split("|")]
        table[cells[0]] = {key: float(value) for key, value in zip(keys, cells[1:], strict=True)}
    return table


def test_the_task_defaults_table_is_what_fedavg_resolves() -> None:
    table = task_defaults_table((DOCS / "configuration.md").read_text(encoding="utf-8"))
    assert len(table) >= 7
    for task, row in table.items():
        for key, value in row.items():
            assert float(default_for(key, "fedavg", task)) == value, f"{task} {key}"


def widths_by_task(sentence: str) -> dict[str, int]:
    """``1280 on `a`, 384 on `b` and `c`, ...`` or ``a 1280, b and c 384; ...`` → task → width."""
    out: dict[str, int] = {}
    for width, tasks in re.findall(r"(\d+) on ((?:`[\w-]+`(?:,? and |, )?)+)", sentence):
        out |= {task: int(width) for task in re.findall(r"`([\w-]+)`", tasks)}
    for tasks, width in re.findall(r"((?:[a-z][\w-]+(?:,? and |, )?)+) (\d+)\b", sentence):
        out |= {task: int(width) for task in re.findall(r"[\w-]+", tasks) if "-" in task}
    return out


def _shipped_tasks() -> list[str]:
    return ["digits-mlp", "fmnist-cnn", "fmnist-effnet", "rt-minilm", "rt-smollm", "fortunes-minilm"]


@pytest.mark.parametrize("method", ["safe", "protosisa"])
def test_the_configuration_page_states_safes_adapter_width_per_task(method: str) -> None:
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    sentence = " ".join(re.search(r"`safe\.adapter-width` (\d+ on .+?any other task)", page, re.S)[1].split())
    stated = widths_by_task(sentence)
    assert sentence.endswith(f"{FALLBACK['adapter-width']} on any other task")
    for task in _shipped_tasks():
        assert stated.get(task, FALLBACK["adapter-width"]) == default_for("adapter-width", method, task), task


def test_the_safe_page_states_the_same_adapter_widths() -> None:
    page = (DOCS / "methods" / "safe.md").read_text(encoding="utf-8")
    row = re.search(r"^\| `safe\.adapter-width` \| `0` \(auto: ([^)]*)\)", page, re.M)[1]
    stated = widths_by_task(row)
    assert stated, "the SAFE page's adapter-width row states no width"
    for task, width in stated.items():
        assert default_for("adapter-width", "safe", task) == width, task


def test_a_wrong_width_on_the_page_is_seen() -> None:
    """Negative control: the width the configuration page used to state for fmnist-effnet is read as 256."""
    assert widths_by_task("1280 on `rt-minilm`, 256 on `fmnist-effnet` and `digits-mlp`")["fmnist-effnet"] == 256


def _cli() -> click.Group:
    from fedforget.unlearning.cli import app

    return typer.main.get_command(app)


def _takes_store(command: click.Command) -> bool:
    if isinstance(command, click.Group):
        return all(_takes_store(sub) for sub in command.commands.values())
    return any("--store" in getattr(param, "opts", ()) for param in command.params)


def test_the_cli_page_lists_every_command_and_which_take_no_store() -> None:
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `fedforget ([a-z]+)", page, re.M))
    cli = _cli()
    assert listed == set(cli.commands)
    without = {name for name, command in cli.commands.items() if not _takes_store(command)}
    sentence = " ".join(re.search(r"Every command but (.+?) takes `--store`", page, re.S)[1].split())
    assert {word.split()[0] for word in re.findall(r"`([a-z ]+)`", sentence)} == without
