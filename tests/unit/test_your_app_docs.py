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
    """Flower's check of ``clientapp = "tabular_mlp.client_app:app"`` (what `flwr run` runs on the app), in a
    folder of its own; the modules and path entries the check adds are taken back, so that a later test in this
    process imports the example's real package."""
    import sys

    from flwr.supercore import object_ref

    def ours(name: str) -> bool:
        return name == "tabular_mlp" or name.startswith("tabular_mlp.")

    saved_modules = {m: sys.modules.pop(m) for m in [m for m in sys.modules if ours(m)]}
    saved_path = list(sys.path)
    package = folder / "tabular_mlp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "client_app.py").write_text(module_text, encoding="utf-8")
    try:
        return object_ref.validate("tabular_mlp.client_app:app", check_module=True, project_dir=folder)
    finally:
        for name in [m for m in sys.modules if ours(m)]:
            del sys.modules[name]
        sys.modules.update(saved_modules)
        sys.path[:] = saved_path


@pytest.mark.parametrize("page", ["your-app.md", "strategies.md"])
def test_the_client_app_module_the_docs_show_passes_flowers_check(page, tmp_path):
    snippet = client_app_snippet(DOCS / page)
    valid, reason = flower_check(snippet, tmp_path)
    assert valid, reason
    assert snippet == client_app_snippet(DOCS / "your-app.md")  # one way, shown the same on both pages


def test_flowers_check_refuses_a_bare_import_of_the_client_app(tmp_path):
    valid, reason = flower_check("from fedforget.client import app\n", tmp_path)
    assert not valid and "Unable to find attribute app" in str(reason)


def command_lines(page: Path, executable: str) -> list[str]:
    """Each ``executable ...`` command of the page's code blocks, continuation lines joined."""
    lines = []
    for block in code_blocks(page):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith(executable + " "):
                lines.append(line.strip())
    return lines


@pytest.mark.parametrize("executable", ["flower-supernode", "flower-superlink", "flower-superexec"])
def test_every_flower_command_the_docs_show_uses_flags_the_installed_flower_has(executable):
    from .test_deploy_files import flags_of

    pages = [p for p in DOCS.rglob("*.md") if "results" not in p.parts]
    shown = {(p.name, line) for p in pages for line in command_lines(p, executable)}
    if not shown:
        return
    known = flags_of(executable)
    assert known, f"{executable} --help listed no flags"
    unknown = {(page, flag) for page, line in shown for flag in re.findall(r"(?<!\S)(--[a-z][a-z0-9-]+)", line)
               if flag not in known}
    assert not unknown, f"{executable} 1.42 has no {sorted(unknown)}"


def test_a_removed_flag_is_caught():
    from .test_deploy_files import flags_of

    assert "--clientappio-api-address" not in flags_of("flower-supernode")


def env_sh_connections() -> set[str]:
    """The connections the config.toml written by the example's ``env.sh`` holds."""
    import tomllib

    text = (EXAMPLE / "env.sh").read_text(encoding="utf-8")
    toml = re.search(r"<<'TOML'\n(.*?)\nTOML\n", text, flags=re.S)
    assert toml, "env.sh writes no config.toml"
    return set(tomllib.loads(toml[1])["superlink"]) - {"default"}


def test_every_connection_the_your_app_page_runs_on_is_one_env_sh_writes():
    text = (DOCS / "your-app.md").read_text(encoding="utf-8")
    used = {*re.findall(r"flwr run \. ([a-z][a-z0-9-]*)", text), *re.findall(r"--federation ([a-z][a-z0-9-]*)", text)}
    assert used and used <= env_sh_connections(), f"{sorted(used - env_sh_connections())} are not in env.sh's config"


def test_every_variable_of_the_loopback_script_is_documented_on_the_deployment_page():
    script = (ROOT / "deploy" / "loopback.sh").read_text(encoding="utf-8")
    variables = set(re.findall(r"\$\{(FEDFORGET_DEPLOY_[A-Z_]+|PYTHON):-", script))
    page = (DOCS / "operations" / "deployment.md").read_text(encoding="utf-8")
    assert {"FEDFORGET_DEPLOY_DIR", "FEDFORGET_DEPLOY_DATA"} <= variables
    assert not {v for v in variables if f"`{v}`" not in page}, "undocumented: " + ", ".join(
        sorted(v for v in variables if f"`{v}`" not in page))


def test_the_in_code_server_app_the_docs_show_is_the_one_ci_runs():
    """The page's in-code ServerApp is, line for line, the app the end-to-end tests run; its run config the app's."""
    import tomllib

    page, fixture = DOCS / "your-app.md", ROOT / "tests" / "fixtures" / "in-code-app"
    shown = [b for b in code_blocks(page) if b.startswith("# in_code_app/server_app.py")]
    assert len(shown) == 1
    code = (fixture / "in_code_app" / "server_app.py").read_text()
    assert "\n".join(shown[0].splitlines()[1:]) in code
    config = [b for b in code_blocks(page) if b.startswith("[tool.flwr.app.config]\naction")]
    assert len(config) == 1
    declared = tomllib.loads((fixture / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert tomllib.loads(config[0])["tool"]["flwr"]["app"]["config"] == declared
