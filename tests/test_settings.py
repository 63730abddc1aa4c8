"""perfpredict.settings: every PERFPREDICT_* variable is read there, and the modules that use one ask it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from perfpredict.settings import Settings

PACKAGE = Path(__file__).resolve().parents[1] / "perfpredict"


def test_each_variable_is_parsed():
    env = {
        "PERFPREDICT_CACHE_DIR": "/c",
        "PERFPREDICT_NO_GRAPH_CACHE": "yes",
        "PERFPREDICT_ARTIFACTS": os.pathsep.join(["/a", "", "/b"]),
        "PERFPREDICT_GRID_G_PER_KWH": " france ",
        "PERFPREDICT_DEVICES": "/d.yaml",
        "PERFPREDICT_PRICES": "/p.json",
        "PERFPREDICT_MEASURED_DIR": "/m",
        "PERFPREDICT_HOST_PROFILE": "/h.json",
        "XDG_CACHE_HOME": "/xc",
        "XDG_CONFIG_HOME": "/xf",
        "XDG_DATA_HOME": "/xd",
    }
    s = Settings.from_environment(env)
    assert s.cache_dir == Path("/c") and s.graph_cache is False
    assert s.artifact_dirs == (Path("/a"), Path("/b"))  # an empty entry is no folder
    assert s.grid == "france" and s.device_files == (Path("/d.yaml"),) and s.prices_file == Path("/p.json")
    assert s.measured_dir == Path("/m") and s.host_profile == Path("/h.json")
    assert s.user_cache_dir == Path("/xc/perfpredict") and s.config_dir == Path("/xf/perfpredict")
    assert s.data_dir == Path("/xd/perfpredict")


def test_unset_means_the_defaults():
    s = Settings.from_environment({"PERFPREDICT_NO_GRAPH_CACHE": "0", "PERFPREDICT_CACHE_DIR": "  "})
    assert s.cache_dir is None and s.graph_cache is True and s.artifact_dirs == ()
    assert s.config_dir == Path.home() / ".config" / "perfpredict"


def test_the_modules_follow_the_environment(monkeypatch, tmp_path):
    from perfpredict.caching import graph_store
    from perfpredict.hardware import carbon, user_config

    monkeypatch.setenv("PERFPREDICT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PERFPREDICT_GRID_G_PER_KWH", "123")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert graph_store.STORE.directory() == tmp_path / "graph-store"
    assert carbon.grid_intensity_g_per_kwh() == 123.0
    assert user_config.default_profile_path() == tmp_path / "cfg" / "perfpredict" / "host_profile.json"


def test_no_module_but_settings_reads_a_perfpredict_variable():
    pattern = re.compile(r"(environ|getenv)\W[^\n]*(PERFPREDICT_|XDG_|ENV_)")
    readers = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "settings.py" and pattern.search(p.read_text())
    )
    assert readers == []
