"""The receipt signing key lives outside any checkout, owner-only, and concurrent first uses agree on one key;
a key at the old place inside the checkout keeps being used (old receipts keep verifying)."""

from __future__ import annotations

import multiprocessing as mp
import os
import stat
from pathlib import Path

import pytest

from fedforget.unlearning import receipt as rc


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.delenv(rc.KEY_ENV, raising=False)
    monkeypatch.delenv(rc.SECRETS_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("FEDFORGET_HOME", str(tmp_path / "checkout"))
    (tmp_path / "checkout").mkdir()
    rc._told_legacy.clear()
    return tmp_path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def public(key) -> bytes:  # noqa: ANN001
    return rc._public_raw(key)


def test_receipt_key_defaults_to_xdg_config_outside_the_checkout_dir_0700_file_0600(env):
    key = rc.load_or_create_key()
    path = env / "xdg" / "fedforget" / rc.KEY_NAME
    assert rc.key_path() == path and path.is_file()
    assert mode(path.parent) == 0o700 and mode(path) == 0o600
    assert not (env / "checkout" / ".keys").exists()
    assert public(rc.load_or_create_key()) == public(key)  # the same key on every later use


def test_receipt_key_home_config_without_xdg_and_fedforget_secrets_overrides(env, monkeypatch):
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(env / "home"))
    assert rc.key_path() == env / "home" / ".config" / "fedforget" / rc.KEY_NAME
    monkeypatch.setenv(rc.SECRETS_ENV, str(env / "vault"))
    rc.load_or_create_key()
    assert mode(env / "vault") == 0o700 and mode(env / "vault" / rc.KEY_NAME) == 0o600


def test_receipt_key_env_still_names_the_key_file(env, monkeypatch):
    monkeypatch.setenv(rc.KEY_ENV, str(env / "elsewhere" / "k.pem"))
    rc.load_or_create_key()
    assert (env / "elsewhere" / "k.pem").is_file() and not (env / "xdg").exists()


def test_an_old_key_inside_the_checkout_keeps_being_used_and_says_so_once(env, capsys):
    legacy_dir = env / "checkout" / ".keys"
    legacy_dir.mkdir(mode=0o700)
    old = rc.create_once(legacy_dir / rc.KEY_NAME, _pem())
    key = rc.load_or_create_key()
    rc.load_or_create_key()
    assert public(key) == public(_load(old))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "old place" in err[0] and str(legacy_dir / rc.KEY_NAME) in err[0]
    assert not (env / "xdg" / "fedforget" / rc.KEY_NAME).exists()  # no new key made silently


def test_a_key_at_the_new_place_wins_over_the_old_one(env, capsys):
    (env / "checkout" / ".keys").mkdir()
    rc.create_once(env / "checkout" / ".keys" / rc.KEY_NAME, _pem())
    new = rc.create_once(env / "xdg" / "fedforget" / rc.KEY_NAME, _pem())
    assert public(rc.load_or_create_key()) == public(_load(new))
    assert capsys.readouterr().err == ""


def test_create_once_keeps_the_first_writers_bytes_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "d" / "secret"
    assert rc.create_once(path, b"first") == b"first"
    assert rc.create_once(path, b"second") == b"first"  # FileExistsError: the winner's bytes
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret"] and mode(path) == 0o600


def _pem() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption())


def _load(pem: bytes):  # noqa: ANN202
    from cryptography.hazmat.primitives import serialization

    return serialization.load_pem_private_key(pem, password=None)


def _first_use(barrier, out) -> None:  # noqa: ANN001
    barrier.wait()
    out.put(public(rc.load_or_create_key()))


def test_concurrent_first_use_ends_with_one_key(env):
    ctx = mp.get_context("fork")
    n = 6
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_first_use, args=(barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    keys = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    directory = env / "xdg" / "fedforget"
    assert len(set(keys)) == 1 and keys[0] == public(rc.load_or_create_key())
    assert sorted(p.name for p in directory.iterdir()) == [rc.KEY_NAME, "receipt-ed25519.pub"]  # no temp file left
    assert mode(directory / rc.KEY_NAME) == 0o600


def test_a_missing_key_whose_public_record_remains_is_an_error_never_silently_replaced(env):
    rc.load_or_create_key()
    path = rc.key_path()
    record = env / "xdg" / "fedforget" / "receipt-ed25519.pub"
    assert record.is_file()  # written when the key was made
    path.unlink()
    with pytest.raises(rc.ReceiptKeyError, match=r"missing, but .*records that one was made.*restore it from your "
                                                 r"backup.*fedforget receipt --new-key"):
        rc.load_or_create_key()
    assert not path.exists()


def test_a_missing_key_while_the_store_holds_receipts_is_an_error(env):
    store = env / "store"
    (store / "receipts").mkdir(parents=True)
    rc.load_or_create_key(store)  # control: no receipt yet, nothing names a key: one is made
    rc.key_path().unlink()
    rc.public_record_path(rc.key_path()).unlink()
    (store / "receipts" / "request-1.json").write_text("{}")
    with pytest.raises(rc.ReceiptKeyError, match="holds receipts signed with it"):
        rc.load_or_create_key(store)
    assert not rc.key_path().exists()


def test_a_key_made_before_records_existed_gets_its_record_on_next_use(env):
    path = env / "xdg" / "fedforget" / rc.KEY_NAME
    rc.create_once(path, _pem())
    key = rc.load_or_create_key()
    assert rc.public_record_path(path).read_bytes() == rc.public_pem(key)


@pytest.mark.parametrize("lost", [False, True])
def test_new_key_replaces_the_key_and_keeps_the_old_public_half_to_check_earlier_receipts(env, lost):
    old = rc.load_or_create_key()
    if lost:
        rc.key_path().unlink()  # only the record is left to say what the old key was
    path, print_, kept = rc.rotate_key()
    new = rc.load_or_create_key()
    assert path == rc.key_path() and print_ == rc.fingerprint(new) and public(new) != public(old)
    assert kept == path.with_name(f"receipt-ed25519.{rc.fingerprint(old)}.pub")
    assert rc.load_public_key(kept) == public(old)
    assert rc.public_record_path(path).read_bytes() == rc.public_pem(new) and mode(path) == 0o600


@pytest.mark.timeout(60)
def test_a_key_path_naming_a_fifo_is_refused_without_blocking_or_creating(env, monkeypatch):
    fifo = env / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setenv(rc.KEY_ENV, str(fifo))
    for use in (rc.load_or_create_key, rc.coordinator_public_key):
        with pytest.raises(rc.ReceiptKeyError, match="is a fifo, not a regular file"):
            use()
    with pytest.raises(OSError, match="is a fifo"):
        rc.create_once(fifo, b"x")  # a winner that is no file is never read
