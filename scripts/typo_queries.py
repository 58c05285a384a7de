"""Write a collection's queries with one typing error each, for measuring typo tolerance (``bm25 --fuzzy``).

In each query (those with a word of five letters or more) one such word, chosen at random, gets one random edit: a
letter deleted, inserted, replaced, or two unlike neighbours swapped (the errors of Damerau's study of
misspellings). Seeded, so the file is the same on every machine. Usage::

    python scripts/typo_queries.py ../shared/data/scifact test runs/scifact-typos.tsv [--seed 0]
    semiret eval --data ../shared/data/scifact --queries runs/scifact-typos.tsv -r bm25 --fuzzy ...
"""

from __future__ import annotations

import argparse
import random
import re
import string
from pathlib import Path

from semiret.data import Collection


def with_typo(text: str, rng: random.Random) -> str:
    """``text`` with one edit in one of its words of five letters or more (unchanged when it has none)."""
    words = [m for m in re.finditer(r"[A-Za-z]{5,}", text)]
    if not words:
        return text
    word = rng.choice(words)
    letters = list(word.group())
    at = rng.randrange(1, len(letters) - 1)  # never the first letter: people rarely get it wrong
    edit = rng.choice(("delete", "insert", "replace", "swap"))
    if edit == "swap":  # two letters that differ, or the swap changes nothing
        unlike = [n for n in range(1, len(letters) - 1) if letters[n].lower() != letters[n + 1].lower()]
        if unlike:
            at = rng.choice(unlike)
        else:
            edit = "replace"
    if edit == "delete":
        del letters[at]
    elif edit == "insert":
        letters.insert(at, rng.choice(string.ascii_lowercase))
    elif edit == "replace":
        letters[at] = rng.choice([c for c in string.ascii_lowercase if c != letters[at].lower()])
    else:
        letters[at], letters[at + 1] = letters[at + 1], letters[at]
    return text[:word.start()] + "".join(letters) + text[word.end():]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", help="A BEIR collection folder.")
    parser.add_argument("split", help="The split whose judged queries to write.")
    parser.add_argument("output", type=Path, help="The queries file to write (id<TAB>text).")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    collection = Collection(args.data)
    queries = collection.queries(args.split)
    rng = random.Random(args.seed)
    lines, unchanged = [], 0
    for query_id, text in queries.items():
        text = " ".join(text.split())
        typo = with_typo(text, rng)
        unchanged += typo == text
        lines.append(f"{query_id}\t{typo}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines) - unchanged} queries with one typo each written to {args.output}"
          + (f", and {unchanged} without a word of five letters as they were" if unchanged else ""))


if __name__ == "__main__":
    main()
