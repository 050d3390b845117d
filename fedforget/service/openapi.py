"""The service's OpenAPI schema, as checked in at ``docs/service/openapi.json``.

Regenerate it after changing a route or a body: ``python -m fedforget.service.openapi --write``
(``tests/integration/test_forget_service.py`` compares the running app's schema with the file).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "service" / "openapi.json"


def schema_text(schema: dict[str, Any] | None = None) -> str:
    """The schema as the file holds it (sorted keys, two-space indent, a final newline)."""
    if schema is None:
        from fedforget.service.app import create_app

        schema = create_app(None).openapi()
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = schema_text()
    if "--write" in argv:
        SCHEMA_FILE.parent.mkdir(parents=True, exist_ok=True)
        SCHEMA_FILE.write_text(text, encoding="utf-8")
        print(f"wrote {SCHEMA_FILE}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
