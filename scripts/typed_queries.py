"""Write a collection's queries as a search box holds them while their last word is being typed, for measuring search
as you type (``bm25 --prefix``).

Each query is cut inside a word of five letters or more, the last such word (a query ending in a shorter word or a
number is cut before it): the word's first half is kept (at least three letters), the rest of the query dropped. No
randomness: the file is the same on every machine. Usage::

    python scripts/typed_queries.py ../shared/data/scifact test runs/scifact-typed.tsv
    semiret eval --data ../shared/data/scifact --queries runs/scifact-typed.tsv -r bm25 --prefix ...
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from semiret.data import Collection


def being_typed(text: str) -> str:
    """``text`` cut inside its last word of five letters or more (unchanged when it has none)."""
    words = list(re.finditer(r"[A-Za-z]{5,}", text))
    if not words:
        return text
    word = words[-1]
    return text[:word.start()] + word.group()[:max(3, (len(word.group()) + 1) // 2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", help="A BEIR collection folder.")
    parser.add_argument("split", help="The split whose judged queries to write.")
    parser.add_argument("output", type=Path, help="The queries file to write (id<TAB>text).")
    args = parser.parse_args()
    queries = Collection(args.data).queries(args.split)
    lines = [f"{query_id}\t{being_typed(' '.join(text.split()))}\n" for query_id, text in queries.items()]
    args.output.write_text("".join(lines), encoding="utf-8")
    print(f"{len(lines)} queries written to {args.output}")


if __name__ == "__main__":
    main()
