"""The deadline settings live in service.db: defaults when none were set (an old store opens unchanged), each
change appended (never overwriting the one before), bad values refused with nothing written."""

from __future__ import annotations

import sqlite3

import pytest

from fedforget.service.deadline_writer import write_settings
from fedforget.service.requests_db import SERVICE_DB
from fedforget.unlearning.deadline_settings import (
    DeadlineSettingError,
    DeadlineSettings,
    read_settings,
    settings_history,
)


def test_a_store_without_settings_runs_on_gdpr_purged_and_seven_days(tmp_path):
    assert read_settings(tmp_path) == DeadlineSettings("gdpr", "purged", 7.0)
    sqlite3.connect(tmp_path / SERVICE_DB).close()  # a service.db written before the settings existed
    assert read_settings(tmp_path) == DeadlineSettings()
    assert settings_history(tmp_path) == []


def test_each_change_is_appended_and_the_newest_is_in_force(tmp_path):
    write_settings(tmp_path, DeadlineSettings("ccpa", "acknowledged", 3))
    write_settings(tmp_path, DeadlineSettings("gdpr", "retrained", 10))
    assert read_settings(tmp_path) == DeadlineSettings("gdpr", "retrained", 10)
    assert [h["policy"] for h in settings_history(tmp_path)] == ["ccpa", "gdpr"]
    db = sqlite3.connect(tmp_path / SERVICE_DB)  # a fresh service.db has the service's own tables
    assert {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")} >= {"requests", "accuracy"}
    db.close()


@pytest.mark.parametrize(("settings", "why"), [
    (DeadlineSettings(policy="hipaa"), "unknown deadline policy 'hipaa': use one of gdpr, ccpa"),
    (DeadlineSettings(completion_point="applied"), "unknown completion point"),
    (DeadlineSettings(nearing_days=-1), "nearing window"),
    (DeadlineSettings(nearing_days=float("nan")), "nearing window"),
])
def test_bad_settings_are_refused_and_nothing_is_written(tmp_path, settings, why):
    with pytest.raises(DeadlineSettingError, match=why):
        write_settings(tmp_path, settings)
    assert not (tmp_path / SERVICE_DB).exists()
