"""Average a saved dense encoder's weights with the model it started from (WiSE-FT), after the fact.

``python scripts/average_dense.py MODEL OUT [--base minilm] [--share 0.5]`` writes to OUT the encoder whose weights
are ``(1 - SHARE) * MODEL + SHARE * BASE`` (for an HCE or any dense model fine-tuned from BASE; what ``semiret train hce --average-with-base`` does).
"""

from __future__ import annotations

import argparse

from semiret.models.encoders import average_with_base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--base", default="minilm")
    parser.add_argument("--share", type=float, default=0.5)
    args = parser.parse_args()
    average_with_base(args.model, args.base, args.share, args.out)


if __name__ == "__main__":
    main()
