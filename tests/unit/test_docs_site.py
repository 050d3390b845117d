"""The documentation: a README that fits on a screen, a MkDocs site that builds in strict mode (every
link and image resolves), and no pointer to design notes that live outside this repository."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250
OUTSIDE = ("../shared", "DESIGN.md", "digest §")


def test_mkdocs_build_strict_passes(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "index.html").is_file()
    assert (site / "methods" / "safe" / "index.html").is_file()


def test_a_methods_page_joins_the_nav_without_a_line_of_its_own(tmp_path: Path) -> None:
    """The nav hook adds a page under docs/methods/ that mkdocs.yml does not list, under its first heading,
    after the listed ones; a listed page stays where it is, once."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("methods_nav", ROOT / "tools" / "mkdocs_methods_nav.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    (tmp_path / "methods").mkdir()
    (tmp_path / "methods" / "fedavg.md").write_text("# FedAvg\n", encoding="utf-8")
    (tmp_path / "methods" / "mine.md").write_text("intro\n# Mine: a new method\n", encoding="utf-8")
    config = {"docs_dir": str(tmp_path), "nav": [{"Home": "index.md"}, {"Methods": [{"FedAvg": "methods/fedavg.md"}]}]}
    assert hook.on_config(config)["nav"][1]["Methods"] == [{"FedAvg": "methods/fedavg.md"},
                                                          {"Mine: a new method": "methods/mine.md"}]


def test_mkdocs_strict_refuses_a_broken_link(tmp_path: Path) -> None:
    """Negative control: the same build fails on a page that links to a file that is not there."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n[gone](nowhere.md)\n", encoding="utf-8")
    (tmp_path / "mkdocs.yml").write_text("site_name: x\ndocs_dir: docs\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert "nowhere.md" in done.stdout + done.stderr


def test_readme_fits_on_a_screen() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    assert "## Tests" in lines


def _texts() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "mkdocs.yml", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder in ("fedforget", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in {".pyc", ".png"}:
                files.append(path)
    return files


def test_nothing_points_outside_the_repository() -> None:
    found = []
    for path in _texts():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{number}: {needle!r}" for needle in OUTSIDE if needle in line]
    assert not found, "references to files outside the repository:\n" + "\n".join(found)
