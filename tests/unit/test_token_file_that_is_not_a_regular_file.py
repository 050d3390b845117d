"""A token file that is not a regular file (a directory, a fifo, a device behind a link) is refused in one line
by every token command, never read as "no tokens" and never written over."""

from __future__ import annotations

import os

import pytest

from fedforget.service.tokens import TokenError, create_token, list_tokens, revoke_token, tokens_path


@pytest.fixture
def path(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    target = tokens_path(tmp_path / "store")
    target.parent.mkdir(parents=True, mode=0o700)
    return target


MAKERS = {"a directory": os.mkdir, "a fifo": os.mkfifo, "a device": lambda p: os.symlink("/dev/zero", p)}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_every_token_command_refuses_it_in_one_line_and_leaves_it(tmp_path, path, kind):
    MAKERS[kind](path)
    for command in (lambda: list_tokens(tmp_path / "store"), lambda: revoke_token(tmp_path / "store", "a"),
                    lambda: create_token(tmp_path / "store", "a", ["predict"])):
        with pytest.raises(TokenError, match=f"is {kind}, not a regular file") as exc:
            command()
        assert "\n" not in str(exc.value)
    assert os.path.lexists(path) and path.is_symlink() == (kind == "a device")  # left as it was


def test_an_absent_token_file_is_no_tokens_and_the_first_create_writes_it(tmp_path, path):
    assert list_tokens(tmp_path / "store") == []  # control: absence is not an error
    create_token(tmp_path / "store", "a", ["predict"])
    assert [t.name for t in list_tokens(tmp_path / "store")] == ["a"]
