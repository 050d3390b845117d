"""A user's Flower app written into a folder: a pyproject with ``[tool.flwr.app]`` and its components, and a
module whose ServerApp starts ``Forgettable(ClippedFedAvg(clip=...))`` on digits-mlp with ``start_from_context``
(handing it the arrays of ``initial.npz`` beside the module when there is one). Each test names its own module,
so the apps of two tests never share ``sys.modules``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
from flwr.serverapp import ServerApp

NODES = 3
KEYS = {"task": "digits-mlp", "lr": 0.02, "local_epochs": 1, "slices_per_client": 1, "train_size": 300,
        "test_size": 100, "num_rounds": 3}



def app_pyproject(name: str, serverapp: str, clientapp: str, config: str = "") -> str:
    """A Flower app's ``pyproject.toml``: its name, its components, and its run config's TOML lines (if any)."""
    text = (f'[project]\nname = "{name}"\nversion = "1.0.0"\n\n[tool.flwr.app]\npublisher = "tester"\n\n'
            f'[tool.flwr.app.components]\nserverapp = "{serverapp}"\nclientapp = "{clientapp}"\n')
    return text + (f"\n[tool.flwr.app.config]\n{config}" if config else "")


MODULE = """from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fedforget.strategies import Forgettable, start_from_context

CLIP = {clip!r}
KEYS = {keys!r}
INITIAL = Path(__file__).with_name("initial.npz")


class ClippedFedAvg(FedAvg):
    def __init__(self, clip: float = 0.05, **kwargs) -> None:
        super().__init__(**kwargs)
        self.clip = clip

    def aggregate_train(self, server_round, replies):
        arrays, metrics = super().aggregate_train(server_round, replies)
        if arrays is not None:
            arrays = ArrayRecord({{k: Array(np.clip(v.numpy(), -self.clip, self.clip)) for k, v in arrays.items()}})
        return arrays, metrics


def initial_arrays():
    if not INITIAL.is_file():
        return None
    with np.load(INITIAL) as saved:
        return ArrayRecord({{name: Array(saved[name]) for name in saved.files}})


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    strategy = Forgettable(ClippedFedAvg(clip=CLIP, fraction_train=0.34), **KEYS)
    start_from_context(strategy, grid, context, initial_arrays=initial_arrays())
"""


def write_app(folder: Path, module: str, clip: float = 0.05) -> Path:
    """The app folder, its module ``module`` clipping at ``clip`` (written again: the app's code now)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(app_pyproject(module.replace("_", "-"), f"{module}:app",
                                                         "fedforget.client_app:app"))
    (folder / f"{module}.py").write_text(MODULE.format(clip=clip, keys=KEYS))
    return folder


def write_initial(folder: Path, arrays: dict[str, np.ndarray]) -> None:
    """The arrays the app hands ``start_from_context`` from now on."""
    np.savez(folder / "initial.npz", **arrays)


def server_app(folder: Path, module: str) -> ServerApp:
    """The app's ServerApp, imported from the folder as a Flower run imports it."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    sys.modules.pop(module, None)
    importlib.invalidate_caches()
    return importlib.import_module(module).app
