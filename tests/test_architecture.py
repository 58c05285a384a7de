"""The layering of docs/architecture.md, checked on the source: each package imports only the layers below it
(lazy imports inside functions included), and the inference-free promise (no neural network at query time)
holds for real: searching a lexical or inference-free index never imports torch."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest

import semiret

from helpers import TINY_DOCS

PACKAGE = Path(semiret.__file__).parent
FOUNDATION = {"errors", "progress", "files", "options", "compiled"}
ALLOWED = {
    # layer: what it may import besides itself (the foundation modules may be imported by everyone)
    "data": set(),
    "types": {"data"},
    "text": {"data", "types"},
    "models": {"data", "types", "text"},
    "clustering": {"data", "types"},
    "indexes": {"data", "types", "text", "clustering"},
    "search": {"data", "types", "text", "models", "indexes", "clustering"},
    "evaluation": {"data", "types", "text", "models", "indexes", "search", "clustering"},
    "training": {"data", "types", "text", "models", "indexes", "search", "clustering"},
    "serving": {"data", "types", "text", "models", "indexes", "search", "clustering"},
    "methods": {"data", "types", "text", "models", "indexes", "search", "evaluation", "training", "clustering"},
    "integrations": {"data", "types", "text", "models", "indexes", "search", "clustering", "serving"},
}
"""The entry points (``cli``, ``demo``) may import anything; nothing may import them or a recipe (``methods``)
except what sits above it."""


def _layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def _imports(path: Path) -> set[str]:
    return _imported(path.read_text(encoding="utf-8"), path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])


def _imported(source: str, package: tuple[str, ...]) -> set[str]:
    """The semiret modules ``source`` (a module of ``package``) imports, at module level or inside functions,
    relative imports (``from ..methods import x``) resolved against its package."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            if module.startswith("semiret"):
                found.add(module)
                if module == "semiret" or not node.module:  # ``from . import kernels``: the names are modules
                    found.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("semiret"))
    return found


def test_relative_and_local_imports_are_read_too():
    source = "from ..methods import sidr\nfrom . import kernels\ndef f():\n    from semiret.cli import app\n"
    found = _imported(source, ("semiret", "indexes"))
    assert {"semiret.methods", "semiret.indexes.kernels", "semiret.cli"} <= found


def test_every_layer_imports_only_the_layers_below_it():
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        layer = relative.parts[1] if len(relative.parts) > 1 else ""
        if layer in FOUNDATION:
            allowed = FOUNDATION
        elif layer in ALLOWED:
            allowed = FOUNDATION | {layer} | ALLOWED[layer]
        else:
            continue  # entry points (cli, demo) and the package root
        for module in _imports(path):
            target = _layer(module)
            if target and target not in allowed:
                violations.append(f"{'/'.join(relative.parts)} imports {module}")
    assert not violations, "\n".join(violations)


def test_the_layer_table_covers_every_package():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()} - {"checkpoints"}
    assert packages <= set(ALLOWED), packages - set(ALLOWED)


def test_searching_lexical_and_inference_free_indexes_never_imports_torch(tmp_path, tiny_bert, corpus_jsonl):
    from semiret.search import BagOfTokensRetriever, BM25Retriever, InferenceFreeRetriever

    BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    BagOfTokensRetriever.build(TINY_DOCS, tmp_path / "bot")
    InferenceFreeRetriever.build(TINY_DOCS, tmp_path / "if", model=str(tiny_bert))
    script = textwrap.dedent(f"""
        import sys
        from typer.testing import CliRunner
        from semiret.cli import app
        from semiret.search import open_retriever

        hits = []
        for path, name, options in [("bm25", None, {{}}), ("bot", "idf", {{}}), ("if", None, {{}}),
                                    ("if", "inference-free", {{"idf": "msmarco", "two_phase": "on"}})]:
            retriever = open_retriever({str(tmp_path)!r} + "/" + path, name, **options)
            hits.append(retriever.search("cats and dogs", k=3))
            retriever.search(["statins", "morning garden"], k=2)
        result = CliRunner().invoke(app, ["search", "--index", {str(tmp_path / "if")!r}, "--json", "cats"])
        assert result.exit_code == 0, result.output
        assert hits[0] and hits[1], hits  # (the tiny random SPLADE model may match nothing)
        print(sorted(m for m in ("torch", "transformers", "semiret.methods") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["bm25", "bot", "idf", "dense", "splade", "inference-free", "sidr-full",
                                  "sidr-beta", "sidr-beta-rerank", "gdr"])
def test_every_retriever_and_its_options_appear_in_the_cli_help(name):
    from typer.testing import CliRunner

    from semiret.cli import app
    from semiret.search import retriever_class

    help_text = {command: CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"}).stdout
                 for command in ("index", "search", "eval")}
    cls = retriever_class(name)
    assert name in help_text["eval"]
    for command, options in (("index", cls.documents.Options), ("search", cls.queries.Options)):
        for field in fields(options):
            flag = field.metadata.get("flag", "--" + field.name.replace("_", "-"))
            assert flag in help_text[command] and flag in help_text["eval"], (command, flag)
