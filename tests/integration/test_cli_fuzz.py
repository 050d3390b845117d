"""Every CLI command fed bad input by hypothesis (ids, slices, clients, paths, run configs, numbers,
corrupt JSON and SQLite): exit code 2, exactly one line on stderr, no traceback, nothing on stdout,
and the store's bytes unchanged."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedforget.store import Store

from .helpers import invoke, train_in_process

FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
STORE_COMMANDS = ["status", "forget", "evaluate", "retrain", "verify", "audit"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "s"
    train_in_process(root, 3, method="fedsgt", **{"chains.groups": 2, "chains.budget": 2, "slices-per-client": 2,
                                                  "local-epochs": 1})
    return root


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def assert_refused(argv: list[str], store: Path | None = None) -> None:
    before = digest(store) if store else None
    code, out, err = invoke(argv)
    lines = err.strip().splitlines()
    assert code == 2, (argv, code, out[-500:], err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("fedforget: error: "), (argv, err[-2000:])
    assert "Traceback" not in err and out == "", (argv, out[-500:])
    if store:
        assert digest(store) == before, f"{argv} changed the store"


unknown_ids = st.one_of(st.integers(max_value=-1), st.integers(min_value=10**6, max_value=2**63 - 1))
not_int = st.text(min_size=0, max_size=12).filter(lambda s: not s.strip().lstrip("+-").isdigit())
text_arg = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=300)


@FUZZ
@given(samples=st.lists(unknown_ids, min_size=1, max_size=4), clients=st.lists(st.integers(3, 10**9), max_size=2))
def test_forget_unknown_samples_or_clients(store, samples, clients):
    argv = ["forget", "--store", str(store)] + [f"--sample={s}" for s in samples] + [f"--client={c}" for c in clients]
    assert_refused(argv, store)


@FUZZ
@given(slices=st.lists(text_arg.filter(lambda s: s not in {"0:0", "0:1", "1:0", "1:1", "2:0", "2:1"}),
                       min_size=1, max_size=3))
def test_forget_malformed_or_unknown_slices(store, slices):
    assert_refused(["forget", "--store", str(store)] + [f"--slice={s}" for s in slices], store)


@FUZZ
@given(value=not_int, option=st.sampled_from(["--sample", "--client"]))
def test_forget_non_integer_ids(store, value, option):
    assert_refused(["forget", "--store", str(store), f"{option}={value}"], store)


def test_forget_with_nothing_named(store):
    assert_refused(["forget", "--store", str(store)], store)


@FUZZ
@given(command=st.sampled_from(STORE_COMMANDS), name=text_arg.filter(lambda s: s.strip() not in {"", ".", ".."}))
def test_every_store_command_with_a_path_that_is_not_a_store(store, tmp_path, command, name):
    extra = ["--sample", "1"] if command == "forget" else []
    assert_refused([command, "--store", str(tmp_path / "missing" / name), *extra])
    assert_refused([command, "--store", str(store / "manifest.json"), *extra], store)


@FUZZ
@given(garbage=st.binary(max_size=200), command=st.sampled_from(["status", "forget", "evaluate", "verify", "audit"]),
       victim=st.sampled_from(["manifest.json", "ledger.sqlite"]))
def test_every_store_command_on_a_corrupt_manifest_or_ledger(store, tmp_path_factory, garbage, command, victim):
    root = tmp_path_factory.mktemp("corrupt") / "s"
    shutil.copytree(store, root)
    (root / victim).write_bytes(garbage if victim == "ledger.sqlite" else b"{" + garbage)
    extra = ["--sample", str(Store.open(store).manifest()["partitions"]["0"][0][0])] if command == "forget" else []
    assert_refused([command, "--store", str(root), *extra], root)


bad_run_config = st.one_of(
    st.builds(lambda k, v: f"zz-{k}={v}", st.from_regex(r"[a-z]{1,8}", fullmatch=True), st.integers()),
    st.builds(lambda k, v: f"{k}={v}",
              st.sampled_from(["chains.groups", "chains.budget", "budget", "num-rounds", "local-epochs", "lr"]),
              st.integers(max_value=0)),
    st.builds(lambda k, v: f"{k}={v!r}", st.sampled_from(["chains.groups", "seed", "lr", "num-rounds", "budget"]),
              st.text(min_size=1, max_size=8).filter(lambda s: "'" not in s)),
    st.sampled_from(["method='nope'", "task=\"no-such-task\"", "chains.groups=", "a b c", "x=[1,", "fraction-train=2.0",
                     "chains.groups=3", "safe.coarse=2 method='fedsgt'"]),
)


@FUZZ
@given(config=bad_run_config)
def test_run_refuses_a_bad_run_config_before_starting_flower(tmp_path, config):
    assert_refused(["run", "--store", str(tmp_path / "new"), "--federation", "no-such-connection",
                    "--run-config", config])
    assert not (tmp_path / "new").exists()


@FUZZ
@given(command=st.sampled_from(["deletion-rate", "sequences"]), option=st.sampled_from(["--groups", "--budget"]),
       value=st.integers(min_value=-10**6, max_value=0))
def test_theory_refuses_non_positive_sizes(command, option, value):
    assert_refused(["theory", command, f"{option}={value}"])


THEORY_BOUNDS = {"deletion-rate": {"--groups": 1000, "--budget": 10_000, "--shards": 1000, "--clusters": 100_000,
                                     "--trials": 1_000_000, "--seed": 2**63 - 1},
                 "sequences": {"--groups": 1000, "--budget": 10_000, "--t": 1_000_000, "--seed": 2**63 - 1}}
theory_option = st.sampled_from([(c, o) for c, opts in THEORY_BOUNDS.items() for o in opts])


@FUZZ
@given(option=theory_option, excess=st.one_of(st.integers(1, 10**6), st.integers(10**6, 10**30)))
def test_theory_refuses_every_number_past_its_documented_bound(option, excess):
    command, name = option
    assert_refused(["theory", command, f"{name}={THEORY_BOUNDS[command][name] + excess}"])


@FUZZ
@given(groups=st.integers(1, 1000), budget=st.integers(1, 10_000), trials=st.integers(1, 1_000_000),
       method=st.sampled_from(["fedsgt", "s3t", "sisa", "fedcio"]), shards=st.integers(1, 1000),
       clusters=st.integers(1, 100_000))
def test_theory_refuses_monte_carlo_work_past_its_bound_before_starting(groups, budget, trials, method, shards,
                                                                        clusters):
    from fedforget.methods.chains.theory import monte_carlo_work

    per_trial = monte_carlo_work(method, groups, shards, clusters, 1)
    if per_trial * trials <= 25_000_000:
        trials = int(25_000_000 / per_trial) + 1
        if trials > 1_000_000:
            return
    assert_refused(["theory", "deletion-rate", "--method", method, "--groups", str(groups), "--budget",
                    str(budget), "--trials", str(trials), "--shards", str(shards), "--clusters", str(clusters)])


def test_the_reported_out_of_memory_theory_calls_are_refused_at_once():
    assert_refused(["theory", "deletion-rate", "--method", "fedsgt", "--groups", "100000", "--budget", "3",
                    "--trials", "10"])
    assert_refused(["theory", "sequences", "--groups", "50", "--budget", "100000"])
    assert_refused(["theory", "sequences", "--groups", "1000", "--budget", "10000"])  # each within, product not


@FUZZ
@given(argv=st.lists(text_arg, min_size=1, max_size=4).filter(lambda a: a[0] not in {"--help", "-h"}),
       command=st.sampled_from([*STORE_COMMANDS, "run", "theory"]))
def test_unknown_options_and_stray_arguments(argv, command):
    if not argv[0].startswith("--"):
        argv = ["--no-such-option", *argv]
    elif argv[0].split("=")[0] in {"--store", "--json", "--sample", "--slice", "--client", "--federation",
                                   "--run-config", "--all", "--artifacts", "--audit-before"}:
        argv = ["--no-such-option", *argv]
    assert_refused([command, *argv])


def test_a_valid_request_still_works_and_prints_its_result(store, tmp_path):
    """Control: the same entry point accepts good input (exit 0, output, the store changes)."""
    root = tmp_path / "s"
    shutil.copytree(store, root)
    before = digest(root)
    sample = Store.open(root).manifest()["partitions"]["0"][0][0]
    code, out, err = invoke(["forget", "--store", str(root), "--sample", str(sample), "--json"])
    assert code == 0 and '"request": 1' in out, err
    assert digest(root) != before


#: digit blocks of other scripts whose digits int() reads as 0-9 (Arabic-Indic, Persian, Devanagari, fullwidth)
OTHER_ZEROS = ["\u0660", "\u06f0", "\u0966", "\uff10"]
lookalike = st.one_of(
    st.builds(lambda n, z: "".join(chr(ord(z) + int(d)) for d in str(n)), st.integers(0, 2),
              st.sampled_from(OTHER_ZEROS)),
    st.builds(lambda n: f"0_{n}", st.integers(0, 2)),  # 1_8 is 18 to int()
    st.builds(lambda n, pad: pad.format(n), st.integers(0, 2), st.sampled_from(["+{}", " {}", "{} ", "{}\t"])),
)
#: where an id is typed; {v} is the value (each names an id the store holds once read as int())
ID_ARGVS = [["forget", "--sample", "{v}"], ["forget", "--client", "{v}"], ["forget", "--slice", "{v}:0"],
            ["forget", "--slice", "0:{v}"], ["locate", "--sample", "{v}"], ["samples", "--client", "{v}"],
            ["samples", "--client", "0", "--slice", "{v}"], ["receipt", "{v}", "--no-verify"]]


@FUZZ
@given(value=lookalike, argv=st.sampled_from(ID_ARGVS))
def test_an_id_int_reads_but_not_written_in_ascii_digits_is_refused_everywhere_an_id_is_typed(store, value, argv):
    assert 0 <= int(value) <= 2  # control: Python's int() takes it as an id this store holds
    assert_refused([argv[0], "--store", str(store), *(a.format(v=value) for a in argv[1:])], store)


@FUZZ
@given(value=st.one_of(st.integers(2**63, 10**40).map(str), st.just("9" * 5000)), argv=st.sampled_from(ID_ARGVS))
def test_an_id_at_or_past_2_63_is_refused_everywhere_an_id_is_typed(store, value, argv):
    assert_refused([argv[0], "--store", str(store), *(a.format(v=value) for a in argv[1:])], store)


@pytest.mark.timeout(120)
def test_serve_refuses_a_tls_path_that_is_no_pem_file_before_reading_it(store, tmp_path):
    import os

    fifo, big = tmp_path / "fifo", tmp_path / "big.pem"
    os.mkfifo(fifo)
    with open(big, "wb") as fh:
        fh.truncate(2 * 2**20)
    for bad in ("/dev/zero", str(fifo), str(tmp_path), str(big)):
        assert_refused(["serve", "--store", str(store), "--port", "1", "--tls-cert", bad, "--tls-key", bad], store)
