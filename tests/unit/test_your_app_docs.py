"""What docs/your-app.md, docs/strategies.md and docs/operations/deployment.md show a Flower user works as shown:
the ClientApp module passes Flower's own check of ``[tool.flwr.app.components]``, every Flower command's flags
exist in the installed flwr, and every connection a page runs on is one the example's ``env.sh`` writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLE = ROOT / "examples" / "tabular-mlp"
CLIENT_APP_HEADER = "# tabular_mlp/client_app.py"


def code_blocks(page: Path) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


def client_app_snippet(page: Path) -> str:
    found = [b for b in code_blocks(page) if b.startswith(CLIENT_APP_HEADER)]
    assert len(found) == 1, f"{page.name} shows no `{CLIENT_APP_HEADER}` block"
    return found[0]


def flower_check(module_text: str, folder: Path) -> tuple[bool, str | None]:
    """Flower's check of ``clientapp = "tabular_mlp.client_app:app"`` (what `flwr run` runs on the app)."""
    import sys

    from flwr.supercore import object_ref

    for name in [m for m in sys.modules if m == "tabular_mlp" or m.startswith("tabular_mlp.")]:
        del sys.modules[name]  # found in this folder, not where an earlier check found it
    package = folder / "tabular_mlp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "client_app.py").write_text(module_text, encoding="utf-8")
    return object_ref.validate("tabular_mlp.client_app:app", check_module=True, project_dir=folder)


@pytest.mark.parametrize("page", ["your-app.md", "strategies.md"])
def test_the_client_app_module_the_docs_show_passes_flowers_check(page, tmp_path):
    snippet = client_app_snippet(DOCS / page)
    valid, reason = flower_check(snippet, tmp_path)
    assert valid, reason
    assert snippet == client_app_snippet(DOCS / "your-app.md")  # one way, shown the same on both pages


def test_flowers_check_refuses_a_bare_import_of_the_client_app(tmp_path):
    valid, reason = flower_check("from fedforget.client import app\n", tmp_path)
    assert not valid and "Unable to find attribute app" in str(reason)
