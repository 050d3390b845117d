"""The documentation's diagrams show with no network: each is an SVG drawn from its Mermaid source
(docs/diagrams/*.mmd, by tools/render_diagrams.py), no page or README asks a browser to run Mermaid, and each
SVG was drawn from the source as it is now. The floors diagram draws the floors of the import-graph test, in
its order, and each of its arrows is an import the package has."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from tests.unit.test_import_graph import FLOORS, PACKAGE, floor_of, import_graph, module_files

ROOT = Path(__file__).resolve().parents[2]
DIAGRAMS = ROOT / "docs" / "diagrams"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _renderer():
    spec = importlib.util.spec_from_file_location("render_diagrams", ROOT / "tools" / "render_diagrams.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stale_diagrams(folder: Path) -> list[str]:
    """Each source in ``folder`` whose SVG is missing or was drawn from other source bytes."""
    render = _renderer()
    out = []
    for source in sorted(folder.glob("*.mmd")):
        svg = source.with_suffix(".svg")
        if not svg.is_file() or not svg.read_text(encoding="utf-8").startswith(render.stamp(source)):
            out.append(f"{source.relative_to(folder)}: run python tools/render_diagrams.py")
    return out


def test_every_diagram_svg_was_drawn_from_its_source_as_it_is() -> None:
    assert sorted(DIAGRAMS.glob("*.mmd")), "no diagram sources"
    assert stale_diagrams(DIAGRAMS) == []


def test_a_changed_source_is_seen_as_not_drawn_again(tmp_path: Path) -> None:
    """Negative control: one byte more in a source, or its SVG missing, makes the diagram stale."""
    for source in DIAGRAMS.glob("*.mmd"):
        (tmp_path / source.name).write_bytes(source.read_bytes())
        (tmp_path / source.with_suffix(".svg").name).write_bytes(source.with_suffix(".svg").read_bytes())
    assert stale_diagrams(tmp_path) == []
    edited = tmp_path / "floors.mmd"
    edited.write_text(edited.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    (tmp_path / "lifecycle.svg").unlink()
    assert stale_diagrams(tmp_path) == ["floors.mmd: run python tools/render_diagrams.py",
                                        "lifecycle.mmd: run python tools/render_diagrams.py"]


def test_no_page_asks_a_browser_to_run_mermaid() -> None:
    """A mermaid fence would need Mermaid's JavaScript from a CDN: pages show the SVGs instead."""
    assert [p.relative_to(ROOT).as_posix() for p in PAGES if "```mermaid" in p.read_text(encoding="utf-8")] == []


def test_every_svg_is_shown_and_self_contained() -> None:
    """Each SVG appears on a page, runs no script and loads nothing from elsewhere."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    for svg in sorted(DIAGRAMS.glob("*.svg")):
        assert f"diagrams/{svg.name})" in text, f"{svg.name} is on no page"
        body = svg.read_text(encoding="utf-8")
        assert "<script" not in body and "@import" not in body
        assert not re.search(r"""(href|src)=["']?https?:""", body), f"{svg.name} links outside itself"


def test_the_floors_diagram_draws_the_import_graph_floors_in_order() -> None:
    """Top to bottom the floors of test_import_graph, highest first, one arrow down each, and each arrow an
    import some module of the upper floor makes of the lower one."""
    source = (DIAGRAMS / "floors.mmd").read_text(encoding="utf-8")
    drawn = re.findall(r"\*\*(.+?):\*\*", source)
    names = [name for name, _ in FLOORS]
    assert drawn == names[::-1]
    graph = import_graph(module_files(PACKAGE))
    pairs = {(floor_of(s), floor_of(t)) for s, targets in graph.items() for t in targets}
    assert all((upper, upper - 1) in pairs for upper in range(1, len(names))), "an arrow with no import"
