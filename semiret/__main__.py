"""``python -m semiret``: the ``semiret`` command line."""

from semiret.cli import main

main()
