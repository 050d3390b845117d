"""MkDocs hook: every page under ``docs/methods/`` is in the nav's Methods section, those listed in
``mkdocs.yml`` in their order and any other after them under its first heading, so a method's page needs no
nav line of its own (``docs/architecture.md``, "How to add a method")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SECTION = "Methods"


def _title(page: Path) -> str:
    return next((line[2:].strip() for line in page.read_text(encoding="utf-8").splitlines()
                 if line.startswith("# ")), page.stem)


def on_config(config: Any) -> Any:  # noqa: ANN401 (MkDocs' config object)
    section = next(item[SECTION] for item in config["nav"] if isinstance(item, dict) and SECTION in item)
    listed = {next(iter(entry.values())) if isinstance(entry, dict) else entry for entry in section}
    docs = Path(config["docs_dir"])
    for page in sorted((docs / "methods").glob("*.md")):
        path = page.relative_to(docs).as_posix()
        if path not in listed:
            section.append({_title(page): path})
    return config
