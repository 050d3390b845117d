"""`flwr-run.log` (written from `flwr run`'s output) holds no ANSI escape sequences; the child gets NO_COLOR
and this checkout's own local SuperLink ports."""

from __future__ import annotations

import stat

from rich.console import Console

from fedforget.local_superlink import CONTROL_ENV, HTTP_ENV
from fedforget.unlearning import flwr_runner
from fedforget.unlearning.flwr_runner import strip_ansi

ESC = "\x1b"


def test_strip_ansi_removes_colours_cursor_moves_hyperlinks_and_charset_escapes():
    line = (f"{ESC}[92mINFO {ESC}[0m:  {ESC}[1mround 1/2: test accuracy 0.5000{ESC}[0m {ESC}]8;;http://x{ESC}\\"
            f"link{ESC}]8;;{ESC}\\{ESC}[2K{ESC}(B\n")
    assert strip_ansi(line) == "INFO :  round 1/2: test accuracy 0.5000 link\n"
    assert strip_ansi("plain [brackets] stay\n") == "plain [brackets] stay\n"


def test_flwr_run_log_holds_no_ansi_escape_sequences(tmp_path, monkeypatch):
    fake = tmp_path / "flwr"
    fake.write_text("#!/bin/sh\n"
                    "printf '\\033[92mINFO \\033[0m:  round 1/1: test accuracy 0.7500\\n'\n"
                    "printf '\\033[91mERROR\\033[0m: something \\033[1mbold\\033[0m\\n'\n"
                    "echo \"NO_COLOR=$NO_COLOR http=$" + HTTP_ENV + " control=$" + CONTROL_ENV + "\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "local-superlink.env").write_text(f"{HTTP_ENV}=21004\n{CONTROL_ENV}=21006\n")
    monkeypatch.setenv("FLWR_HOME", str(home))
    monkeypatch.delenv(HTTP_ENV, raising=False)
    monkeypatch.delenv(CONTROL_ENV, raising=False)
    monkeypatch.setattr(flwr_runner, "flwr_cli", lambda: str(fake))
    code, log_path = flwr_runner.flwr_run("local-simulation", "", str(tmp_path / "store"),
                                          Console(file=open("/dev/null", "w"), force_terminal=True))  # noqa: SIM115
    text = log_path.read_text()
    assert code == 0 and ESC not in text
    assert "INFO :  round 1/1: test accuracy 0.7500" in text and "ERROR: something bold" in text
    assert "NO_COLOR=1 http=21004 control=21006" in text
