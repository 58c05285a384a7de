"""Moved to :mod:`semiret.methods.cli` (a command line over recipes sits above them); this forwards until
``semiret/cli.py`` imports ``train_app`` from there, and is then deleted."""

from semiret.methods.cli import train_app  # noqa: F401
