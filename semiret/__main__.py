"""``python -m semiret``: the ``semiret`` command line."""

from semiret.cli import main

if __name__ == "__main__":
    main()
