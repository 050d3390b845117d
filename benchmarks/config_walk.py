"""The walk of a SAFE run's config through the code: every fedforget function that holds or reads it, in the
order the run reaches them, and the chain of calls from the strategy's ``start()`` to the first training message.

A tiny SAFE training (``digits-mlp``, 3 nodes, one round: the config of SAFE's end-to-end flow) runs in process
(:func:`fedforget.inprocess.run_in_process`, the real ServerApp and ClientApp) under ``sys.settrace``.

**The config** is every instance of ``RunConfig`` (:mod:`fedforget.core.config`) or of one of its group tables
(the types of ``RunConfig().tables``: ``cfg.safe``, ``cfg.chains``, ...) created while the run executes: the
ServerApp's parse, the strategy's, each node's per message, and any the code builds itself.

**A step** is a fedforget function (a comprehension or generator expression folded into the function that
holds it; module and class bodies excluded) that, while the run executes, either

- *holds* the config: one of its frame locals (an argument, at the call; any local, at the return) is a config
  object, or
- *reads* the config: it reads an attribute of a config object (dunder names excluded), seen by wrapping the
  config classes' ``__getattribute__`` for the run.

"steps" counts distinct functions, "files" distinct files; both are split into the server side and the nodes'
side (a function under Flower's ``ClientApp.__call__``), and into the config's own code (the modules that
define the config classes) and the rest.

    python benchmarks/config_walk.py                                  # docs/results/config_walk.json
    python benchmarks/config_walk.py --out docs/results/config_walk_after.json
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from inspect import CO_OPTIMIZED
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_common import last_change, machine_info, quiet_flower  # noqa: E402
from flwr.app import Message  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

# The apps are imported here, before the trace: what their import runs is not the run's walk.
import fedforget.client_app  # noqa: E402, F401
import fedforget.server_app  # noqa: E402, F401
from fedforget.core.config import RunConfig, parse_run_config  # noqa: E402
from fedforget.inprocess import run_in_process  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fedforget"
#: SAFE's end-to-end flow's config (tests/e2e/test_safe_flow.py, with tests/integration/helpers.py's DIGITS).
CONFIG: dict[str, object] = {"method": "safe", "task": "digits-mlp", "lr": 0.02, "local-epochs": 2,
                             "safe.coarse": 2, "safe.fine": 2, "num-rounds": 1, "safe.adapter-steps": 4, "seed": 5}
NODES = 3
#: Frames of these names are folded into the function that holds them.
FOLDED = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")
TRAINING = "train"


def config_types() -> tuple[type, ...]:
    """RunConfig and its group tables' types: what a parsed run config is made of."""
    tables = getattr(RunConfig(), "tables", ())
    return (RunConfig, *dict.fromkeys(type(t) for t in tables))


def step_name(code: CodeType) -> str:
    """``f.<locals>.<genexpr>.<locals>.<dictcomp>`` → ``f``: a comprehension is part of the function holding it."""
    parts = code.co_qualname.split(".")
    cut = next((i for i, part in enumerate(parts) if i and part in FOLDED), len(parts))
    return ".".join(parts[:cut]).removesuffix(".<locals>")


def where(filename: str) -> str:
    """A code file as the report names it: relative to the checkout, or to its site-packages."""
    path = Path(filename)
    if path.is_relative_to(ROOT) and not path.is_relative_to(ROOT / ".venv"):
        return str(path.relative_to(ROOT))
    return filename.split("site-packages/", 1)[-1]


@dataclass
class Step:
    """One function the config reaches."""

    order: int
    file: str
    function: str
    line: int
    how: set[str] = field(default_factory=set)
    reads: set[str] = field(default_factory=set)
    types: set[str] = field(default_factory=set)
    sides: set[str] = field(default_factory=set)

    def to_json(self) -> dict[str, Any]:
        return {"order": self.order, "file": self.file, "function": self.function, "line": self.line,
                "how": sorted(self.how), "reads": sorted(self.reads), "types": sorted(self.types),
                "sides": sorted(self.sides)}


@dataclass
class Walk:
    """What a traced run saw: the steps in first-seen order, the config objects, the chain to training."""

    types: tuple[type, ...]
    preexisting: set[int]
    own: set[str]
    steps: dict[tuple[str, str], Step] = field(default_factory=dict)
    configs: dict[int, str] = field(default_factory=dict)
    parses: dict[str, int] = field(default_factory=dict)
    kept: list[object] = field(default_factory=list)
    handoffs: dict[tuple[str, str], int] = field(default_factory=dict)
    chain: list[dict[str, Any]] | None = None
    started: bool = False
    before_training: dict[tuple[str, str], None] = field(default_factory=dict)
    node_depth: int = 0
    prefix: str = str(PACKAGE) + os.sep

    def is_config(self, value: object) -> bool:
        return type(value) in self.types and id(value) not in self.preexisting

    def side(self) -> str:
        return "node" if self.node_depth else "server"

    def seen(self, frame: FrameType, how: str, value: object, attribute: str | None = None) -> None:
        code = frame.f_code
        key = (where(code.co_filename), step_name(code))
        step = self.steps.get(key)
        if step is None:
            step = self.steps[key] = Step(len(self.steps) + 1, key[0], key[1], code.co_firstlineno)
        step.how.add(how)
        step.types.add(type(value).__name__)
        step.sides.add(self.side())
        if attribute is not None:
            step.reads.add(attribute)
        if type(value) is RunConfig and id(value) not in self.configs:
            self.kept.append(value)  # held, so that no later object reuses its id
            self.configs[id(value)] = self.side()

    def held(self, frame: FrameType, how: str) -> None:
        for value in list(frame.f_locals.values()):
            if self.is_config(value):
                self.seen(frame, how, value)
                if how == "argument" and frame.f_back is not None:
                    pair = (f"{where(frame.f_back.f_code.co_filename)}:{step_name(frame.f_back.f_code)}",
                            f"{where(frame.f_code.co_filename)}:{step_name(frame.f_code)}")
                    self.handoffs[pair] = self.handoffs.get(pair, 0) + 1

    def first_training_message(self, frame: FrameType) -> None:
        """The stack that built the run's first ``train*`` message, outermost first."""
        stack = []
        while frame is not None:
            stack.append({"file": where(frame.f_code.co_filename), "function": frame.f_code.co_qualname,
                          "line": frame.f_lineno, "fedforget": frame.f_code.co_filename.startswith(self.prefix)})
            frame = frame.f_back
        self.chain = stack[::-1]


def tracer(walk: Walk) -> Callable[[FrameType, str, Any], Any]:
    """A ``sys.settrace`` function: calls into fedforget (their locals at call and return), Flower's
    ``ClientApp.__call__`` (the nodes' side) and ``Message.__init__`` (the first training message)."""
    client_call, message_init = ClientApp.__call__.__code__, Message.__init__.__code__
    parse = parse_run_config.__code__

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event != "return":
            return local
        code = frame.f_code
        if code is client_call:
            walk.node_depth -= 1
        elif code is message_init:
            kind = frame.f_locals.get("message_type")
            if walk.chain is None and not walk.node_depth and isinstance(kind, str) and kind.startswith(TRAINING):
                walk.first_training_message(frame.f_back)
        else:
            walk.held(frame, "local")
        return local

    def call(frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_filename.startswith(walk.prefix):
            if not code.co_flags & CO_OPTIMIZED or code.co_qualname in FOLDED:  # import-time code: a module or
                return None  # class body, a comprehension at module level
            if code is parse and frame.f_back is not None:
                caller = f"{walk.side()} {where(frame.f_back.f_code.co_filename)}:{step_name(frame.f_back.f_code)}"
                walk.parses[caller] = walk.parses.get(caller, 0) + 1
            walk.held(frame, "argument")
            if walk.chain is None and not walk.node_depth:
                walk.started = walk.started or code.co_name == "start"
                if walk.started:
                    walk.before_training[(where(code.co_filename), step_name(code))] = None
        elif code is client_call:
            walk.node_depth += 1
        elif code is not message_init:
            return None
        frame.f_trace_lines = False
        return local

    return call


@contextmanager
def reads_recorded(walk: Walk) -> Iterator[None]:
    """Every attribute read of a config object by fedforget code, recorded as a step while the block runs."""
    originals = {cls: cls.__dict__.get("__getattribute__") for cls in walk.types}

    def wrap(cls: type) -> Callable[[object, str], Any]:
        inner = cls.__getattribute__

        def getattribute(self: object, name: str) -> Any:
            if not name.startswith("__") and walk.is_config(self):
                frame = sys._getframe(1)
                if frame.f_code.co_filename.startswith(walk.prefix) and frame.f_code.co_flags & CO_OPTIMIZED:
                    walk.seen(frame, "read", self, name)
            return inner(self, name)

        return getattribute

    for cls in walk.types:
        cls.__getattribute__ = wrap(cls)
    try:
        yield
    finally:
        for cls, original in originals.items():
            if original is None:
                del cls.__getattribute__
            else:
                cls.__getattribute__ = original


def config_code(types: tuple[type, ...]) -> set[str]:
    """The files that define the config classes and their bases: the config's own code."""
    return {where(inspect.getfile(t)) for cls in types for t in cls.__mro__ if t is not object}


def method_modules() -> list[str]:
    return sorted(m for m in sys.modules if m.startswith("fedforget.methods."))


def traced_run(config: Mapping[str, object], nodes: int) -> tuple[Walk, float]:
    types = config_types()
    preexisting = {id(o) for o in gc.get_objects() if type(o) in types}
    walk = Walk(types, preexisting, config_code(types))
    trace = tracer(walk)
    with tempfile.TemporaryDirectory() as tmp, quiet_flower(), reads_recorded(walk):
        started = time.perf_counter()
        threading.settrace(trace)
        sys.settrace(trace)
        try:
            run_in_process({**config, "store": str(Path(tmp) / "store")}, nodes)
        finally:
            sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]
        seconds = time.perf_counter() - started
    return walk, seconds


def lines_of(files: set[str]) -> int:
    return sum(len((ROOT / f).read_text(encoding="utf-8").splitlines()) for f in files)


def chain_summary(chain: list[dict[str, Any]], reached: list[tuple[str, str]]) -> dict[str, Any]:
    """The frames from the outermost fedforget ``start`` (else the ServerApp's ``main``) to the training
    message: how many, how many are fedforget's, over which files and how many lines; and every fedforget
    function the server ran from ``start`` until that message."""
    starts = [i for i, f in enumerate(chain) if f["fedforget"] and f["function"].split(".")[-1] == "start"]
    mains = [i for i, f in enumerate(chain) if f["file"] == "fedforget/server_app.py"]
    begin = starts[0] if starts else (mains[0] if mains else 0)
    frames = chain[begin:]
    ours = [f for f in frames if f["fedforget"]]
    files = {f["file"] for f in ours}
    reached_files = {f for f, _ in reached}
    return {"from": f"{frames[0]['file']}:{frames[0]['function']}", "frames": len(frames),
            "fedforget-frames": len(ours), "fedforget-files": len(files),
            "fedforget-files-lines": lines_of(files), "files": sorted(files),
            "before-training": {"functions": len(reached), "files": len(reached_files),
                                "files-lines": lines_of(reached_files),
                                "by-file": {f: sum(g == f for g, _ in reached) for f in sorted(reached_files)}},
            "frames-list": frames, "before-training-functions": [f"{f}:{n}" for f, n in reached]}


def summarize(steps: list[Step], own: set[str]) -> dict[str, Any]:
    def count(selected: list[Step]) -> dict[str, int]:
        return {"steps": len(selected), "files": len({s.file for s in selected})}

    return {**count(steps),
            "server": count([s for s in steps if "server" in s.sides]),
            "node": count([s for s in steps if "node" in s.sides]),
            "outside-config-code": count([s for s in steps if s.file not in own]),
            "runconfig-only": count([s for s in steps if "RunConfig" in s.types]),
            "holding": count([s for s in steps if s.how != {"read"}]),
            "reading": count([s for s in steps if "read" in s.how])}


def measure(config: Mapping[str, object], nodes: int) -> dict[str, Any]:
    loaded_before = method_modules()
    walk, seconds = traced_run(config, nodes)
    loaded = method_modules()
    steps = sorted(walk.steps.values(), key=lambda s: s.order)
    own = walk.own
    files: dict[str, int] = {}
    for s in steps:
        files.setdefault(s.file, 0)
        files[s.file] += 1
    return {
        "what": "the fedforget functions a SAFE run's config reaches, in first-seen order, and the call chain "
                "from the strategy's start() to the first training message",
        "definition": {
            "config": "every instance of fedforget.core.config.RunConfig or of one of its group tables "
                      f"({', '.join(t.__name__ for t in walk.types[1:])}) created while the run executes",
            "step": "a fedforget function (comprehensions and generator expressions folded into the function "
                    "holding them; module and class bodies excluded) that holds a config object in a frame local "
                    "(at its call: an argument; at its return: any local) or reads a non-dunder attribute of one",
            "steps": "distinct (file, function) steps; files: distinct files among them",
            "side": "node: reached under Flower's ClientApp.__call__ (the in-process nodes); server: otherwise",
            "own-config-code": "the files defining the config classes and their bases",
            "hand-off": "a distinct (caller function, callee function) pair where the callee receives a config "
                        "object as an argument",
            "RunConfig-instances": "every RunConfig object seen (a parse makes several: dataclasses.replace "
                                   "builds the resolved copy); parse_run_config-calls: calls of "
                                   "fedforget.core.config.parse_run_config, by side and caller",
            "imports": "the ServerApp and ClientApp modules are imported before the trace starts (what their "
                       "import runs is not the run's walk); modules they import lazily are imported inside it",
            "chain": "the stack at the return of the first Message.__init__ the server side makes with a "
                     "message_type starting with 'train', from the outermost fedforget start() (else the "
                     "ServerApp main); before-training: every fedforget function the server side calls from "
                     "the first fedforget start() until that message (the nodes' handlers excluded)",
        },
        "config": {"run-config": dict(config), "nodes": nodes, "runtime": "fedforget.inprocess.run_in_process"},
        "machine": machine_info(),
        "fedforget-last-changed-in": last_change("fedforget"),
        "seconds-traced": round(seconds, 1),
        "summary": {**summarize(steps, own), "hand-offs": len(walk.handoffs)},
        "config-objects": {"RunConfig-instances": len(walk.configs),
                           "server": sum(side == "server" for side in walk.configs.values()),
                           "node": sum(side == "node" for side in walk.configs.values()),
                           "parse_run_config-calls": sum(walk.parses.values()),
                           "parse_run_config-callers": dict(sorted(walk.parses.items()))},
        "own-config-code": sorted(own),
        "methods-modules": {"before-run": loaded_before, "imported-by-run": sorted(set(loaded) - set(loaded_before))},
        "files": files,
        "chain": chain_summary(walk.chain, list(walk.before_training)) if walk.chain else None,
        "steps": [s.to_json() for s in steps],
        "hand-offs": [{"from": a, "to": b, "calls": n} for (a, b), n in sorted(walk.handoffs.items())],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "config_walk.json")
    parser.add_argument("--nodes", type=int, default=NODES)
    args = parser.parse_args(argv)
    result = measure(CONFIG, args.nodes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    chain = {k: v for k, v in (result["chain"] or {}).items() if not k.endswith(("-list", "-functions"))}
    print(json.dumps({"summary": result["summary"], "config-objects": result["config-objects"], "chain": chain,
                      "seconds-traced": result["seconds-traced"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
