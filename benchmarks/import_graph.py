"""How fedforget's packages depend on each other: the import graph, what stands in for an import, and what
an import loads.

Read from the source with ``ast`` (nothing of the package is imported for the graph):

- every import statement of ``fedforget/``, marked by where it runs: ``module`` (when the module is
  imported), ``function`` (inside a function, on its first call) or ``type-checking`` (under
  ``if TYPE_CHECKING:``, never at run time); folded to packages (``core``, ``store``, ``federation``,
  ``methods/<name>``, ``tasks``, ``training``, ``unlearning``, ``service``, ``strategies``; a top-level
  module is its own node) and checked against the floors of docs/architecture.md (the ones
  ``tests/unit/test_import_graph.py`` enforces): an arrow is upward when its target's floor is higher;
- every string constant ``"fedforget.<module>:<name>"``: a name resolved at run time instead of an
  import statement (an arrow the graph does not show), with the floor it points to; and the plain module
  names (``"fedforget.methods.registry"``) and ``importlib.import_module`` calls beside them.

Measured in fresh interpreters (one per import, ``--repeats`` times): which fedforget modules (and which of
``methods/`` and ``federation/``) ``import fedforget.core``, ``fedforget.core.config``, ``fedforget.store``
and ``fedforget.client_app`` load, which heavy third-party packages come with them, and the median seconds.

    python benchmarks/import_graph.py                                  # docs/results/import_graph.json (+ .png)
    python benchmarks/import_graph.py --out docs/results/import_graph_after.json
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the floors are the test's (tests/unit/test_import_graph.py), read from there

from bench_common import last_change, machine_info  # noqa: E402

from tests.unit.test_import_graph import FLOORS, PACKAGE, floor_of, module_files  # noqa: E402
from tools.import_closure import statements  # noqa: E402

#: The imports measured in fresh interpreters.
TARGETS = ("fedforget.core", "fedforget.core.config", "fedforget.store", "fedforget.client_app")
#: Third-party packages whose load is reported (the cost a per-message ClientApp process pays).
HEAVY = ("flwr", "numpy", "torch", "peft", "transformers", "sklearn", "safetensors", "fastapi")
#: ``"<dotted module>:<dotted name>"``: Flower's way of naming an app, used here to name code without importing it.
NAMED = re.compile(r"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
KINDS = ("module", "function", "type-checking")


@dataclass(frozen=True)
class Import:
    """One import statement's target, where it is and when it runs."""

    source: str
    target: str
    kind: str
    line: int


def owner(name: str, files: Mapping[str, Path]) -> str | None:
    """The package module ``name`` is or lies in (``a.b.func`` → ``a.b``), None outside the package."""
    while name and name not in files:
        name = name.rpartition(".")[0]
    return name or None


def imports(files: Mapping[str, Path]) -> list[Import]:
    """Every import of a package module by a package module (itself excluded), sorted."""
    out = set()
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name, kind, line in statements(tree, module, path.name == "__init__.py"):
            target = owner(name, files)
            if target and target != module:
                out.add(Import(module, target, kind, line))
    return sorted(out, key=lambda i: (i.source, i.line, i.target))


def package_of(module: str) -> str:
    """``fedforget.methods.safe.client`` → ``methods/safe``; ``fedforget.store.ledger`` → ``store``;
    ``fedforget.server_app`` → ``server_app``; the package root → ``fedforget``."""
    parts = module.split(".")[1:]
    if not parts:
        return "fedforget"
    if parts[0] == "methods" and len(parts) > 2:
        return f"methods/{parts[1]}"
    if parts[0] == "methods" and len(parts) == 2 and (PACKAGE / "methods" / parts[1]).is_dir():
        return f"methods/{parts[1]}"
    return parts[0]


def floor_name(module: str) -> str:
    index = floor_of(module)
    return FLOORS[index][0] if index is not None else "none"


def is_upward(source: str, target: str) -> bool:
    here, there = floor_of(source), floor_of(target)
    return here is not None and there is not None and there > here


def named_code(files: Mapping[str, Path]) -> dict[str, Any]:
    """String constants that stand in for imports: ``"fedforget.x:name"``, plain module names, import_module."""
    named, module_names, dynamic = [], [], []
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                match = NAMED.match(node.value)
                target = owner(match["module"], files) if match else None
                if match and target == match["module"]:
                    named.append({"in": module, "line": node.lineno, "names": node.value, "target": target,
                                  "upward": is_upward(module, target)})
                elif node.value in files and node.value.startswith("fedforget."):
                    module_names.append({"in": module, "line": node.lineno, "names": node.value,
                                         "upward": is_upward(module, node.value)})
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                    == "import_module":
                dynamic.append({"in": module, "line": node.lineno})
    by_file = Counter(str(files[n["in"]].relative_to(ROOT)) for n in named)
    return {
        "count": len(named),
        "upward": sum(n["upward"] for n in named),
        "by-file": dict(sorted(by_file.items(), key=lambda kv: (-kv[1], kv[0]))),
        "targets-by-floor": dict(Counter(floor_name(n["target"]) for n in named)),
        "by-package-arrow": _arrows((package_of(n["in"]), package_of(n.get("target", n["names"])))
                                    for n in [*named, *module_names]),
        "items": named,
        "module-name-strings": module_names,
        "import_module-calls": dynamic,
    }


def _arrows(pairs: Iterator[tuple[str, str]]) -> dict[str, int]:
    return dict(sorted(Counter(f"{a} -> {b}" for a, b in pairs if a != b).items()))


def package_graph(edges: list[Import], files: Mapping[str, Path]) -> dict[str, Any]:
    """Packages (floor, modules, lines) and the arrows between them, counted per kind of import."""
    packages: dict[str, dict[str, Any]] = {}
    for module, path in files.items():
        entry = packages.setdefault(package_of(module), {"floor": floor_name(module), "modules": 0, "lines": 0})
        entry["modules"] += 1
        entry["lines"] += len(path.read_text(encoding="utf-8").splitlines())
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    upward: set[tuple[str, str]] = set()
    for i in edges:
        pair = (package_of(i.source), package_of(i.target))
        if pair[0] != pair[1]:
            counts[pair][i.kind] += 1
            if is_upward(i.source, i.target):
                upward.add(pair)
    arrows = [{"from": a, "to": b, **{k: counts[(a, b)][k] for k in KINDS}, "upward": (a, b) in upward}
              for a, b in sorted(counts)]
    return {"packages": dict(sorted(packages.items())), "arrows": arrows}


PROBE = """
import importlib, json, sys, time
t = time.perf_counter()
importlib.import_module(sys.argv[1])
seconds = time.perf_counter() - t
print(json.dumps({"seconds": seconds, "modules": sorted(m for m in sys.modules if m.split(".")[0] == "fedforget"),
                  "heavy": sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[2].split(",")))}))
"""


def loads(target: str, repeats: int) -> dict[str, Any]:
    """What ``import target`` loads in a fresh interpreter, and its median seconds over ``repeats`` runs."""
    runs = []
    for _ in range(repeats):
        proc = subprocess.run([sys.executable, "-c", PROBE, target, ",".join(HEAVY)], capture_output=True,
                              text=True, check=True, cwd=ROOT, timeout=300,
                              env={**os.environ, "FLWR_TELEMETRY_ENABLED": "0"})
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    modules = runs[0]["modules"]
    methods = [m for m in modules if m.split(".")[:2] == ["fedforget", "methods"]]
    federation = [m for m in modules if m.split(".")[:2] == ["fedforget", "federation"]]
    return {"fedforget-modules": len(modules), "methods-and-federation": len(methods) + len(federation),
            "methods": methods, "federation": federation, "heavy": runs[0]["heavy"],
            "seconds-median": round(statistics.median(r["seconds"] for r in runs), 3), "modules": modules}


def measure(repeats: int) -> dict[str, Any]:
    files = module_files(PACKAGE)
    edges = imports(files)
    upward = [i for i in edges if is_upward(i.source, i.target)]
    graph = package_graph(edges, files)
    named = named_code(files)
    return {
        "what": "fedforget's package import graph against its floors, the module:function strings that stand in "
                "for imports, and what importing a floor loads",
        "definition": {
            "edge": "an import statement of a fedforget module naming another (from a import b: a.b if a module, "
                    "else a); kind: module (runs at import), function (inside a def, runs on first call), "
                    "type-checking (under if TYPE_CHECKING, never runs)",
            "package": "methods/<name> for a method package, the first name under fedforget/ otherwise; "
                       "the package root is 'fedforget'",
            "upward": "target floor above source floor, floors as in tests/unit/test_import_graph.py FLOORS",
            "named-import": "a str constant '<fedforget module>:<name>' whose module part is a module of the "
                            "package (docstrings excluded: only whole constants count); a module-name string is "
                            "a str constant equal to a module's dotted name; the figure's red arrows run from the "
                            "module holding the string to the one it names (the module resolving it, core/method.py "
                            "for a method's hooks, is not read: targets-by-floor says where the names point)",
            "loads": "sys.modules names under fedforget after importlib.import_module(target) in a fresh "
                     "interpreter; seconds: that call's wall time, median of repeats (a shared machine: noisy)",
        },
        "config": {"package": str(PACKAGE.relative_to(ROOT)), "targets": list(TARGETS), "repeats": repeats,
                   "heavy": list(HEAVY), "floors": [{"floor": n, "prefixes": list(p)} for n, p in FLOORS]},
        "machine": machine_info(),
        "fedforget-last-changed-in": last_change("fedforget"),
        "summary": {
            "modules": len(files),
            "packages": len(graph["packages"]),
            "imports": {k: sum(i.kind == k for i in edges) for k in KINDS},
            "package-arrows": len(graph["arrows"]),
            "upward-imports": {k: sum(i.kind == k for i in upward) for k in KINDS},
            "upward-package-arrows": sum(a["upward"] for a in graph["arrows"]),
            "named-imports": named["count"],
            "named-imports-upward": named["upward"],
            "module-name-strings": len(named["module-name-strings"]),
            "module-name-strings-upward": sum(n["upward"] for n in named["module-name-strings"]),
            "import_module-calls": len(named["import_module-calls"]),
        },
        "loads": {t: loads(t, repeats) for t in TARGETS},
        "upward-imports": [f"{i.source} -> {i.target} ({i.kind}, line {i.line})" for i in upward],
        "named-imports": named,
        **graph,
    }


def plot(result: Mapping[str, Any], path: Path) -> None:
    """Packages by floor (lowest at the bottom); imports solid (module level) or dashed (in a function), the
    arrows made of code-naming strings (``module:function`` or a module's name) in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    floors = [name for name, _ in FLOORS]
    rows: dict[str, list[str]] = defaultdict(list)
    for name, entry in result["packages"].items():
        rows[entry["floor"]].append(name)
    pos = {name: ((i + 0.5) / len(names) * 12, floors.index(floor) * 2.0)
           for floor, names in rows.items() for i, name in enumerate(sorted(names))}
    fig, ax = plt.subplots(figsize=(15, 11))
    graph = nx.DiGraph()
    graph.add_nodes_from(pos)
    styles = {"module": ("#444444", "solid"), "function": ("#3b7dd8", "dashed")}
    for kind, (color, style) in styles.items():
        edges = [(a["from"], a["to"]) for a in result["arrows"] if a[kind]
                 and (kind == "module" or not a["module"])]
        nx.draw_networkx_edges(graph, pos, edgelist=edges, ax=ax, edge_color=color, style=style, alpha=0.45,
                               arrowsize=8, connectionstyle="arc3,rad=0.08", node_size=1800)
    named = [tuple(k.split(" -> ")) for k in result["named-imports"]["by-package-arrow"]]
    nx.draw_networkx_edges(graph, pos, edgelist=named, ax=ax, edge_color="#d62728", style="dotted", width=1.6,
                           arrowsize=12, connectionstyle="arc3,rad=-0.15", node_size=1800)
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=1800, node_color="#f2f2f2", edgecolors="#666666")
    nx.draw_networkx_labels(graph, pos, ax=ax, font_size=7)
    for i, floor in enumerate(floors):
        ax.text(-0.6, i * 2.0, floor, ha="right", va="center", fontsize=9, color="#555555")
    s = result["summary"]
    ax.set_title(f"fedforget import graph ({result['machine']['commit'][:7]}): {s['package-arrows']} package arrows, "
                 f"{sum(s['upward-imports'].values())} upward imports\nred dotted: code named by a string "
                 f"({s['named-imports']} module:function, {s['module-name-strings']} module names), the arrows "
                 "imports do not show; "
                 "solid: module-level import; dashed blue: only inside functions", fontsize=10)
    ax.set_xlim(-3, 12.5)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "import_graph.json",
                        help="the JSON to write; the figure goes beside it (.png)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh interpreters per measured import")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if not args.no_plot:
        plot(result, args.out.with_suffix(".png"))
    print(json.dumps({"summary": result["summary"],
                      "loads": {t: {k: v for k, v in m.items() if k != "modules"}
                                for t, m in result["loads"].items()}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
