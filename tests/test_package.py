"""The package as users meet it: its version on the command line and as ``python -m semiret``, and a read-only
installation without a home folder, where numba could cache its kernels nowhere."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

from typer.testing import CliRunner

import semiret
from semiret.cli import app


def test_version_everywhere_the_same():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"semiret {semiret.__version__}"
    assert importlib.metadata.version("semiret") == semiret.__version__  # pyproject reads it from the package
    module = subprocess.run([sys.executable, "-m", "semiret", "--version"], capture_output=True, text=True, check=True)
    assert module.stdout.strip() == f"semiret {semiret.__version__}"


def test_numba_caches_in_the_temporary_folder_when_nothing_else_is_writable(monkeypatch, tmp_path):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(semiret._os, "access", lambda path, mode: False)
    semiret._numba_cache_fallback()
    assert semiret._os.environ["NUMBA_CACHE_DIR"].startswith(semiret._tempfile.gettempdir())


def test_numba_keeps_its_own_cache_when_it_can_write(monkeypatch, tmp_path):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    written = []
    monkeypatch.setattr(semiret._os, "access", lambda path, mode: written.append(path) or str(path) == str(tmp_path))
    semiret._numba_cache_fallback()
    assert "NUMBA_CACHE_DIR" not in semiret._os.environ and tmp_path in written  # the cache folder's parent


def test_numba_never_uses_a_cache_folder_others_can_write(monkeypatch, tmp_path):
    """numba reads its cache index with pickle: a folder of the expected name left open by someone else is passed
    over for a fresh private one."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(semiret._tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(semiret._tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(semiret._os, "access", lambda path, mode: False)
    planted = tmp_path / f"semiret-numba-{semiret._os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    semiret._numba_cache_fallback()
    chosen = semiret._os.environ["NUMBA_CACHE_DIR"]
    assert chosen != str(planted) and chosen.startswith(str(tmp_path))
