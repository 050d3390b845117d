"""The Flower app an in-process ``fedforget verify`` plays: the one that trained the store.

A store trained by a user's app (its manifest's ``app``) may hold a run of a strategy built in code that its
stored config cannot rebuild through fedforget's own app (a subclass of a Flower strategy, an attribute of the
user's own), so its from-scratch reference is that app's ServerApp and ClientApp, the ``serverapp`` and
``clientapp`` of its ``[tool.flwr.app.components]``. They are imported from the app's directory as its code is
now, as a fresh ``flwr run`` would: the modules the directory provides are imported anew (a long-lived process
may hold an older copy). The app must still be the one that trained the store (same directory, name and
version: :func:`~fedforget.unlearning.user_app.store_app`). An app whose components are fedforget's own
ServerApp and ClientApp is fedforget's app: its reference runs as for a store that records no app.
"""

from __future__ import annotations

import importlib
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedforget.core.config import ConfigError
from fedforget.store import Store
from fedforget.unlearning.user_app import store_app

#: the components a Flower app names, each a ``module:attribute`` reference
COMPONENTS = ("serverapp", "clientapp")


@dataclass(frozen=True)
class ReferenceApp:
    """A user's Flower app: its directory and its components' ``module:attribute`` references."""

    folder: Path
    serverapp: str
    clientapp: str


def components(folder: Path) -> dict[str, str]:
    """The app's ``[tool.flwr.app.components]`` (``serverapp``, ``clientapp``), {} when it has none."""
    try:
        data = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    found = data.get("tool", {}).get("flwr", {}).get("app", {}).get("components", {})
    return {k: str(v) for k, v in found.items() if k in COMPONENTS} if isinstance(found, dict) else {}


def own_components() -> dict[str, str]:
    """fedforget's own app's components ({} when this copy carries no app manifest)."""
    from fedforget.unlearning.flwr_runner import own_app_dir

    try:
        return components(own_app_dir())
    except FileNotFoundError:
        return {}


def reference_app(store: Store) -> ReferenceApp | None:
    """The user's app an in-process reference of ``store`` runs (None: fedforget's own); :class:`ConfigError`
    (one line) when that app is gone, at another version, or names no ServerApp and ClientApp."""
    app = store.manifest().get("app")
    if not isinstance(app, dict):
        return None
    if components(Path(str(app.get("dir", "")))) == own_components():
        return None
    folder = store_app(store)
    if folder is None:
        return None
    found = components(folder)
    missing = [k for k in COMPONENTS if ":" not in found.get(k, "")]
    if missing:
        raise ConfigError(f"{folder / 'pyproject.toml'} names no {' and no '.join(missing)} in "
                          "[tool.flwr.app.components] (\"module:attribute\"); fedforget verify runs the app that "
                          "trained the store")
    return ReferenceApp(folder, found["serverapp"], found["clientapp"])


def load_components(app: ReferenceApp) -> tuple[Any, Any]:
    """The app's ServerApp and ClientApp, imported from its directory as its code is now."""
    _import_anew(app.folder, {ref.partition(":")[0].partition(".")[0] for ref in (app.serverapp, app.clientapp)})
    return _load(app.serverapp, app.folder), _load(app.clientapp, app.folder)


def _import_anew(folder: Path, packages: set[str]) -> None:
    """Put ``folder`` first on ``sys.path`` and forget the modules of ``packages`` (the components' top-level
    packages, which it holds), so they are read from disk again; no other module of this process is touched."""
    provided = {name for name in packages - {"fedforget"}
                if (folder / name).is_dir() or (folder / f"{name}.py").is_file()}
    for name in [m for m in sys.modules if m.partition(".")[0] in provided]:
        del sys.modules[name]
    if str(folder) in sys.path:
        sys.path.remove(str(folder))
    sys.path.insert(0, str(folder))
    importlib.invalidate_caches()


def _load(reference: str, folder: Path) -> Any:  # noqa: ANN401 - a flwr ServerApp or ClientApp
    module_name, _, attribute = reference.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except Exception as exc:  # noqa: BLE001 - whatever the app's module raises is one line for the user
        what = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        raise ConfigError(f"cannot load {reference!r} of the app in {folder} ({what}); fedforget verify runs the "
                          "app that trained the store") from None
    return found
