"""A fetched repository is read the same way as a checkout and as a bare git directory."""

from __future__ import annotations

import subprocess

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.external.source_tree import SourceTree


def _repo(tmp_path):
    work = tmp_path / "work"
    (work / "a" / "b").mkdir(parents=True)
    (work / "a" / "b" / "x.csv").write_text("k,v\n1,2\n")
    (work / "top.txt").write_text("hello")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    subprocess.run([*git, "-C", str(work), "add", "."], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-qm", "x"], check=True)
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return work, bare


def test_checkout_and_bare_git_directory_read_alike(tmp_path):
    work, bare = _repo(tmp_path)
    checkout, git_dir = SourceTree.open(work), SourceTree.open(bare)
    assert git_dir.is_git_dir and not checkout.is_git_dir
    assert git_dir.files("a") == ["a/b/x.csv"]
    assert [f for f in checkout.files("a")] == ["a/b/x.csv"]
    assert git_dir.read_text("a/b/x.csv") == checkout.read_text("a/b/x.csv") == "k,v\n1,2\n"


def test_missing_source_and_file_say_what_to_do(tmp_path):
    with pytest.raises(InvalidInputError, match="clone the repository"):
        SourceTree.open(tmp_path / "nope")
    _, bare = _repo(tmp_path)
    with pytest.raises(InvalidInputError, match="git could not read"):
        SourceTree.open(bare).read_text("missing.csv")
