"""Find what to forget: `samples` lists a client's ids by slice and unit, `locate` says where a sample is;
bad input is one line, exit 2, nothing written; `status` counts them and names both commands."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from typer.testing import CliRunner

from fedforget.store import Store
from fedforget.unlearning.cli import app

from .helpers import train_in_process

runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = tmp_path_factory.mktemp("find") / "store"
    train_in_process(path, 3, method="fedsgt", **{"chains.groups": 2, "chains.budget": 2, "slices-per-client": 2,
                                                   "train-size": 300, "num-rounds": 1})
    return path


@pytest.fixture
def store(trained, tmp_path):
    dst = tmp_path / "store"
    shutil.copytree(trained, dst)
    return dst


def cli(*args: str):  # noqa: ANN201
    return runner.invoke(app, list(args), terminal_width=400)


def snapshot(path) -> dict[str, str]:  # noqa: ANN001
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_samples_lists_a_clients_ids_by_slice_and_unit_as_in_the_manifest(store):
    plan = Store.open(store).manifest()["partitions"]["1"]
    data = json.loads(cli("samples", "--store", str(store), "--client", "1", "--json").stdout)
    assert data["client"] == 1 and [s["unit"] for s in data["slices"]] == ["1:0", "1:1"]
    assert [s["samples"] for s in data["slices"]] == [sorted(ids) for ids in plan]
    assert data["samples"] == sum(len(ids) for ids in plan) and data["forgotten"] == 0
    one = json.loads(cli("samples", "--store", str(store), "--client", "1", "--slice", "1", "--json").stdout)
    assert [s["unit"] for s in one["slices"]] == ["1:1"]
    text = cli("samples", "--store", str(store), "--client", "1")
    assert text.exit_code == 0 and "unit 1:0" in text.stdout and str(plan[1][0]) in text.stdout


def test_locate_names_client_slice_unit_and_the_request_that_forgot_it(store):
    sid = Store.open(store).manifest()["partitions"]["2"][1][0]
    where = json.loads(cli("locate", "--store", str(store), "--sample", str(sid), "--json").stdout)
    assert (where["client"], where["slice"], where["unit"], where["forgotten"]) == (2, 1, "2:1", False)
    assert cli("forget", "--store", str(store), "--sample", str(sid)).exit_code == 0
    after = json.loads(cli("locate", "--store", str(store), "--sample", str(sid), "--json").stdout)
    assert after["forgotten"] and after["request"] == 1
    listed = json.loads(cli("samples", "--store", str(store), "--client", "2", "--slice", "1", "--json").stdout)
    assert listed["slices"][0]["forgotten"] == [sid]
    text = cli("locate", "--store", str(store), "--sample", str(sid)).stdout
    assert "client 2, slice 1" in text and "request #1" in text


@pytest.mark.parametrize("args, words", [
    (["samples", "--client", "3"], "unknown client 3"),
    (["samples", "--client", "0", "--slice", "2"], "unknown slice 2 of client 0"),
    (["samples", "--client", "-1"], "--client"),
    (["locate", "--sample", "999999"], "unknown sample 999999"),
    (["locate", "--sample", "-5"], "sample id '-5' is not a whole number written in the digits 0-9"),
    (["locate", "--sample", "x"], "--sample"),
])
def test_bad_input_to_samples_or_locate_is_one_line_exit_2_and_writes_nothing(store, args, words, capsys):
    from fedforget.unlearning.cli import main

    before = snapshot(store)
    with pytest.raises(SystemExit) as code:
        main([args[0], "--store", str(store), *args[1:]])
    assert code.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert snapshot(store) == before


def test_bad_input_message_is_one_line_naming_what_is_wrong(store, capsys):
    from fedforget.unlearning.cli import main

    for args, words in ((["samples", "--client", "3"], "unknown client 3: this store has clients (partitions) 0..2"),
                        (["locate", "--sample", "999999"], "unknown sample 999999")):
        with pytest.raises(SystemExit):
            main([args[0], "--store", str(store), *args[1:]])
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err


def test_status_counts_samples_and_names_the_find_commands(store):
    info = json.loads(cli("status", "--store", str(store), "--json").stdout)
    assert info["index"] == {"clients": 3, "slices": 6, "samples": 300}
    text = cli("status", "--store", str(store)).stdout
    assert "300 samples in 6 slices of 3 clients" in text
    assert "fedforget samples --client N" in text and "fedforget locate --sample ID" in text


def test_forget_errors_name_samples_and_locate(store):
    for args in (["--slice", "7:0"], ["--client", "9"], ["--sample", "999999"]):
        result = cli("forget", "--store", str(store), *args)
        assert result.exit_code == 2
        assert "fedforget samples" in result.stderr and "fedforget locate" in result.stderr
