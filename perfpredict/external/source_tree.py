"""A fetched copy of a public repository, read the same way whether it is a checkout or a bare git directory.

The project's mirrors (``fetch github:owner/name``) are git directories without a work tree; a user's own clone
has one. Converters only list and read files, so both are served through ``git`` or the file system alike.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from perfpredict.core.errors import InvalidInputError


@dataclass(frozen=True)
class SourceTree:
    """Files of one repository at ``root``: a checkout (files on disk) or a git directory, read at ``rev``
    (``HEAD`` unless a converter needs an older commit: Vidur's CPU profiles are not at its HEAD)."""

    root: Path
    rev: str = "HEAD"

    @classmethod
    def open(cls, path: str | Path, rev: str = "HEAD") -> SourceTree:
        root = Path(path).expanduser()
        if not root.exists():
            raise InvalidInputError(
                f"source {str(root)!r} does not exist; clone the repository (git clone ...) and pass its folder"
            )
        tree = cls(root, rev)
        if rev != "HEAD" and not tree.is_git_dir:
            raise InvalidInputError(
                f"reading {str(root)!r} at {rev!r} needs its git directory (a checkout's files are its work tree): "
                "pass the fetched mirror, or check the commit out and leave the revision out"
            )
        return tree

    @property
    def is_git_dir(self) -> bool:
        """A bare or mirror git directory (``HEAD`` and ``objects`` at its top, no work tree)."""
        return (self.root / "HEAD").is_file() and (self.root / "objects").is_dir()

    def files(self, prefix: str = "") -> list[str]:
        """Paths (relative, ``/``-separated) of every file under ``prefix``, sorted."""
        if self.is_git_dir:
            out = self._git("ls-tree", "-r", "--name-only", self.rev, "--", prefix or ".")
            return sorted(line for line in out.splitlines() if line)
        base = self.root / prefix
        return sorted(str(p.relative_to(self.root)).replace("\\", "/") for p in base.rglob("*") if p.is_file())

    def read_text(self, path: str) -> str:
        if self.is_git_dir:
            return self._git("show", f"{self.rev}:{path}")
        try:
            return (self.root / path).read_text()
        except OSError as err:
            raise InvalidInputError(f"cannot read {path!r} in {self.root}: {err}") from err

    def commit(self) -> str:
        """The commit a git directory is read at (``""`` for a checkout, whose files may be edited)."""
        return self._git("rev-parse", self.rev).strip() if self.is_git_dir else ""

    def _git(self, *args: str) -> str:
        try:
            done = subprocess.run(
                ["git", "--git-dir", str(self.root), *args], capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.CalledProcessError) as err:
            detail = getattr(err, "stderr", "") or str(err)
            raise InvalidInputError(f"git could not read {self.root}: {detail.strip()[:200]}") from err
        return done.stdout
