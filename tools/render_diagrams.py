"""Render the documentation's diagrams (docs/diagrams/*.mmd, Mermaid source) to SVG files next to them.

The site serves the SVGs as images, so the diagrams show with no network and no JavaScript (Material would
load Mermaid from a CDN). Each SVG records the sha256 of the source it was drawn from;
tests/unit/test_docs_diagrams.py fails when a source changed and its SVG was not drawn again.

Usage: python tools/render_diagrams.py [--mermaid PATH/mermaid.min.js]
Needs Debian's chromium and the venv's playwright; without --mermaid, `npm pack` fetches the pinned Mermaid
once into $FEDFORGET_CACHE (default .cache/) and the script reads it from there.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIAGRAMS = ROOT / "docs" / "diagrams"
MERMAID_VERSION = "11.4.1"
MERMAID_SHA256 = "a43bc1afd446f9c4cc66ac5dd45d02e8d65e26fc5344ec0ef787f88d6ddb6f9e"
CHROMIUM = "/usr/bin/chromium"
#: Arial's metrics (Liberation Sans on Debian): the boxes are sized with the font a reader's machine has
FONT = "Arial, Helvetica, 'Liberation Sans', sans-serif"
STAMP = "<!-- drawn by tools/render_diagrams.py from {name} (sha256 {digest}) with Mermaid {version} -->\n"


def source_digest(source: Path) -> str:
    """The sha256 an SVG records of the source it was drawn from."""
    return hashlib.sha256(source.read_bytes()).hexdigest()


def stamp(source: Path) -> str:
    """The first line of ``source``'s SVG: which source, at which digest, drawn by which Mermaid."""
    return STAMP.format(name=source.name, digest=source_digest(source), version=MERMAID_VERSION)


def mermaid_js(cache: Path) -> Path:
    """The pinned mermaid.min.js, fetched with `npm pack` into ``cache`` when absent; checked by sha256."""
    target = cache / f"mermaid-{MERMAID_VERSION}.min.js"
    if not target.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "pack", f"mermaid@{MERMAID_VERSION}", "--pack-destination", str(cache)],
                       check=True, capture_output=True)
        with tarfile.open(cache / f"mermaid-{MERMAID_VERSION}.tgz") as archive:
            target.write_bytes(archive.extractfile("package/dist/mermaid.min.js").read())
    if hashlib.sha256(target.read_bytes()).hexdigest() != MERMAID_SHA256:
        raise SystemExit(f"{target} is not Mermaid {MERMAID_VERSION} (sha256 differs): delete it and run again")
    return target


def render_all(script: Path, sources: list[Path]) -> None:
    """Draw each source in a headless chromium with no network, writing ``<source>.svg`` beside it."""
    from playwright.sync_api import sync_playwright

    config = {"startOnLoad": False, "theme": "neutral", "fontFamily": FONT, "securityLevel": "strict",
              "htmlLabels": False,
              "flowchart": {"htmlLabels": False, "useMaxWidth": False, "rankSpacing": 24, "nodeSpacing": 30,
                            "wrappingWidth": 520}}
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.route("**/*", lambda route: route.abort())  # offline: nothing is fetched
        page.set_content("<!doctype html><html><body></body></html>")
        page.add_script_tag(content=script.read_text(encoding="utf-8"))
        page.evaluate("config => mermaid.initialize(config)", config)
        for index, source in enumerate(sources):
            svg = page.evaluate("async ([id, text]) => (await mermaid.render(id, text)).svg",
                                [f"diagram-{index}", source.read_text(encoding="utf-8")])
            source.with_suffix(".svg").write_text(stamp(source) + svg + "\n", encoding="utf-8")
            print(f"{source.relative_to(ROOT)} -> {source.with_suffix('.svg').relative_to(ROOT)}")
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mermaid", type=Path, help="a mermaid.min.js to use instead of the pinned download")
    args = parser.parse_args()
    cache = Path(os.environ.get("FEDFORGET_CACHE", ROOT / ".cache"))
    render_all(args.mermaid or mermaid_js(cache), sorted(DIAGRAMS.glob("*.mmd")))


if __name__ == "__main__":
    main()
