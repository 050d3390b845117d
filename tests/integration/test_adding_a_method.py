"""Adding a method is what docs/architecture.md's "How to add a method" says it is: a copy of the source tree
gets a method the codebase does not have (FedCalm, tests/fixtures/added_method/: a confidence penalty on the
nodes, the coordinate-wise median on the server, on the shared adapter training and round), by the recipe's
steps alone; the copy trains it, forgets a sample, retrains and ``fedforget verify`` finds the served model
bit-identical to training from scratch (and not so for a retrain that drops its loss term; one that averages
instead of taking the median serves other bytes); and the files the
change touched are exactly the recipe's table, so no other method's files and no shared module moved."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "added_method"
NAME = "fedcalm"
#: what of the source tree the recipe may touch and the copy needs to run
TREES = ("fedforget", "pyproject.toml", "docs", "mkdocs.yml", "tests/unit/methods", "tests/unit/test_config.py")


# -- the recipe's steps: the only part that knows how a method registers -------------------------------------
def register(root: Path) -> None:
    """The registration in ``registry.py``: one line, the import of the package's ``METHOD``."""
    path = root / "fedforget" / "methods" / "registry.py"
    text, imported = re.subn(r"^(from fedforget\.methods\.safe import METHOD as SAFE  # noqa: F401)$",
                             rf"\1\nfrom fedforget.methods.{NAME} import METHOD as {NAME.upper()}  # noqa: F401",
                             path.read_text(encoding="utf-8"), count=1, flags=re.M)
    assert imported == 1, "the registry's lines moved: update register()"
    path.write_text(text, encoding="utf-8")


def add_config_table(root: Path) -> None:
    """Its keys in the app's pyproject (``flwr run --run-config`` takes only the keys the app declares)."""
    path = root / "pyproject.toml"
    text = path.read_text(encoding="utf-8")
    last = list(re.finditer(r"^\[tool\.flwr\.app\.config\.[^\]]+\]\n(?:[^\[\n].*\n)*", text, flags=re.M))[-1]
    table = f"\n[tool.flwr.app.config.{NAME}]\npenalty = 0.1  # β of the confidence penalty\n"
    path.write_text(text[: last.end()].rstrip("\n") + "\n" + table + "\n" + text[last.end():].lstrip("\n"),
                    encoding="utf-8")


def apply_recipe(root: Path) -> None:
    shutil.copytree(FIXTURE / NAME, root / "fedforget" / "methods" / NAME,
                    ignore=shutil.ignore_patterns("__pycache__"))
    register(root)
    add_config_table(root)
    (root / "tests" / "unit" / "methods" / NAME).mkdir(parents=True)
    shutil.copy(FIXTURE / "unit_tests.py", root / "tests" / "unit" / "methods" / NAME / f"test_{NAME}.py")
    shutil.copy(FIXTURE / f"{NAME}.md", root / "docs" / "methods" / f"{NAME}.md")


# -- the harness --------------------------------------------------------------------------------------------
def _copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z", "--", *TREES], cwd=REPO, capture_output=True, check=True,
                           ).stdout.decode().split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)


def _digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def recipe_files() -> list[str]:
    """The first column of the table under "How to add a method", ``<name>`` filled in: files, or folders
    (ending in ``/``)."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("### How to add a method", 1)[1]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| file"))
    end = next(i for i in range(start, len(lines) + 1) if i == len(lines) or not lines[i].startswith("|"))
    rows = [line for line in lines[start:end] if line.startswith("| `")]
    assert rows, "docs/architecture.md's recipe table is gone"
    return [p.replace("<name>", NAME) for row in rows for p in re.findall(r"`([^`]+)`", row.split("|")[1])]


def _covered(path: str, entries: list[str]) -> str | None:
    return next((e for e in entries if path == e or (e.endswith("/") and path.startswith(e))), None)


def test_a_method_added_by_the_recipe_trains_forgets_exactly_and_touches_only_the_recipes_files(tmp_path):
    root = tmp_path / "tree"
    _copy_tree(root)
    before = _digests(root)
    apply_recipe(root)
    after = _digests(root)

    touched = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    entries = recipe_files()
    assert [p for p in touched if _covered(p, entries) is None] == [], "the change touched files the recipe omits"
    assert sorted(e for e in entries if not any(_covered(p, [e]) for p in touched)) == [], \
        "the recipe names files the change did not need"
    assert not [p for p in touched if p.startswith("fedforget/") and not p.startswith(f"fedforget/methods/{NAME}/")
                and p != "fedforget/methods/registry.py"], "a shared module or another method changed"
    assert [p for p in touched if p in before] == sorted(
        ["fedforget/methods/registry.py", "pyproject.toml"]), "an existing file changed beyond these"
    old, new = ((r / "fedforget" / "methods" / "registry.py").read_text(encoding="utf-8").splitlines()
                for r in (REPO, root))
    changes = [line for line in difflib.unified_diff(old, new, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changes == [f"+from fedforget.methods.{NAME} import METHOD as {NAME.upper()}  # noqa: F401"], \
        f"the registration is one line, the import of the package's METHOD: {changes}"

    script = (FIXTURE / "run_the_method.py").read_text(encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "stores")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["accuracy"] > 0.5, report  # ten classes: chance is 0.1
    assert report["verify"]["exact"] is True, report
    assert report["verify_without_its_loss_term"]["exact"] is False, report
    assert report["served_with_the_mean"] != report["served_with_the_median"], report
