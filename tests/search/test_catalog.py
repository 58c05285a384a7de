"""What `semiret models` lists, and retrievers refusing a model of a kind they do not take (before it loads, before
anything is written), naming the retrievers that do. Fake model folders hold only the JSON that says what they are:
nothing here loads weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import packaged
from semiret.errors import SemiretError
from semiret.models.checkpoints import GDR, NAIL, SIDR, encoder_family, saved_model_kind
from semiret.search import DenseRetriever, HybridRetriever, NailSparseRetriever, SiDRBetaRetriever
from semiret.search.catalog import CARD_MARK, available_models, model_card, write_model_card

from helpers import TINY_DOCS


def _saved(folder, kind, training=None):
    folder.mkdir(parents=True)
    kind.write_marker(folder, **({"training": training} if training else {}))
    return folder


def _encoder(folder, family, training=None):
    folder.mkdir(parents=True)
    (folder / "semiret-encoder.json").write_text(json.dumps({"family": family}))
    (folder / "weights.bin").write_bytes(b"\0" * 2**20)
    if training:
        (folder / "training.json").write_text(json.dumps(training))
    return folder


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A packaged-checkpoints folder holding a SiDR model, a dense encoder and a GDR model."""
    root = tmp_path / "checkpoints"
    _saved(root / "sidr-x", SIDR, {"config": {"data": "/data/scifact", "split": "train", "base": "splade-tiny"},
                                   "train_seconds": 600})
    _encoder(root / "hce-x", "dense", {"config": {"data": "scifact", "split": "train", "base": "minilm"}})
    _saved(root / "gdr-x", GDR, {"command": "semiret train gdr --data vaswani --epochs 2"})
    monkeypatch.setattr(packaged, "PACKAGED_CHECKPOINTS", root)
    return root


def test_the_catalog_reads_each_checkpoint_from_its_own_files(shipped):
    entries = {entry.name: entry for entry in available_models()}
    assert [e.source for e in entries.values()] == ["registry"] * len(packaged.REGISTRY) + ["packaged"] * 3
    sidr = entries["sidr-x"]
    assert (sidr.kind, sidr.base, sidr.trained_on, sidr.train_minutes) == ("sidr", "splade-tiny", "scifact (train)", 10)
    assert sidr.retrievers == ("sidr-full", "sidr-beta", "sidr-beta-rerank", "hybrid")
    hce = entries["hce-x"]
    assert (hce.kind, hce.base, hce.trained_on, hce.retrievers) == ("dense", "minilm", "scifact (train)",
                                                                     ("dense", "colbert", "hybrid"))
    assert hce.size_mb == 1.0
    assert entries["gdr-x"].trained_on == "vaswani"  # from the command line it recorded
    assert entries["gdr-x"].retrievers == ("gdr", "hybrid")
    minilm = entries["minilm"]
    assert (minilm.kind, minilm.hub_id, minilm.installed) == ("dense", "sentence-transformers/all-MiniLM-L6-v2", True)
    assert entries["smollm2-135m"].retrievers == ()  # a base for training, searched by no retriever


def test_models_command_lists_the_shipped_checkpoints():
    result = CliRunner().invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    listed = {entry["name"]: entry for entry in json.loads(result.stdout)}
    for folder in packaged.PACKAGED_CHECKPOINTS.iterdir():
        assert listed[folder.name]["source"] == "packaged"
    assert listed["inference-free-scifact"]["kind"] == "inference-free"
    assert "inference-free" in listed["inference-free-scifact"]["retrievers"]
    assert listed["nail-scifact"]["retrievers"][:3] == ["nail-sparse", "nail-exh", "bm25+nail"]
    table = CliRunner().invoke(app, ["models"], terminal_width=200)
    assert table.exit_code == 0 and "sidr-scifact" in table.stdout and "sidr-full" in table.stdout
    narrow = subprocess.run([sys.executable, "-m", "semiret", "models"], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "60"}, check=True).stdout  # a pipe, a narrow width
    assert "inference-free-scifact" in narrow and "…" not in narrow  # names whole, the rest folded, never cut


def _front_matter(card: str) -> dict:
    """The YAML block a card begins with, which the Hugging Face hub reads."""
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_the_card_of_a_packaged_checkpoint_says_what_it_is_from_its_records():
    result = CliRunner().invoke(app, ["models", "--card", "hce-scifact"])
    assert result.exit_code == 0, result.output
    card = result.stdout
    assert _front_matter(card) == {"library_name": "semiret", "tags": ["semiret", "hce", "dense-retrieval"],
                                   "base_model": "sentence-transformers/all-MiniLM-L6-v2", "datasets": ["scifact"],
                                   "pipeline_tag": "sentence-similarity"}  # no license: none is recorded
    assert "HCE, the Hierarchical Corpus Encoder" in card and "- Base: `minilm`" in card
    assert "- Data: `scifact`, split `train` (829 training pairs, 5183 documents)" in card
    for retriever in ("dense", "colbert"):
        assert f"semiret index --data corpus.jsonl -r {retriever} --model hce-scifact --out indexes/{retriever}\n" \
               f"semiret search --index indexes/{retriever} " in card
    assert "-r hybrid --neural dense --model hce-scifact" in card and 'load_encoder("hce-scifact")' in card
    assert "| `epochs` | 7 |" in card and "| nDCG@10 | 0.6638 |" in card
    assert "the model is epoch 5's, averaged with its base" in card
    assert "semiret eval --data COLLECTION --split test -r dense --model hce-scifact" in card
    inference_free = model_card("inference-free-scifact")
    assert _front_matter(inference_free)["tags"] == ["semiret", "inference-free", "sparse-retrieval"]
    assert "-r inference-free --model inference-free-scifact" in inference_free and "Geng et al." in inference_free
    assert "`finetune_epochs` | 8" in inference_free and "pretrain_epochs" not in inference_free  # (no such stage)


def test_a_card_leaves_out_what_the_records_do_not_say(shipped, tmp_path):
    gdr = model_card("gdr-x")  # a command is all its record holds
    front = _front_matter(gdr)
    assert front["datasets"] == ["vaswani"] and "base_model" not in front and "pipeline_tag" not in front
    assert "- Command: `semiret train gdr --data vaswani --epochs 2`" in gdr and "Base:" not in gdr
    assert "-r gdr --model gdr-x" in gdr and "| hyperparameter |" not in gdr
    mine = _encoder(tmp_path / "my run" / "model", "dense", {"config": {"base": str(tmp_path / "start")}})
    card = model_card(mine)
    assert _front_matter(card) == {"library_name": "semiret", "tags": ["semiret", "dense", "dense-retrieval"],
                                   "pipeline_tag": "sentence-similarity"}  # a folder as its base: no hub id
    assert "# my run\n" in card and "A dense encoder trained by semiret.\n" in card  # no recipe recorded
    assert f"--model '{mine}' --out indexes/dense" in card and f"- Base: `{tmp_path / 'start'}`" in card
    assert "`hce` recipe: HCE" in model_card(mine, recipe="hce")
    untrained = model_card(_encoder(tmp_path / "saved", "splade"))
    assert "saved by semiret" in untrained and "## Training" not in untrained
    with pytest.raises(SemiretError, match="its model card is the hub's"):
        model_card("minilm")
    with pytest.raises(SemiretError, match="not a model semiret saved"):
        model_card(tmp_path)


def test_a_card_is_written_again_but_never_over_a_readme_the_user_wrote(tmp_path):
    model = _encoder(tmp_path / "run" / "model", "dense", {"config": {"data": "scifact", "base": "minilm"}})
    assert write_model_card(model, "hce") and write_model_card(model, "hce")  # its own card: written again
    assert (model / "README.md").read_text() == model_card(model, "hce")
    assert CARD_MARK in (model / "README.md").read_text()
    (model / "README.md").write_text("# My model\n")
    assert not write_model_card(model, "hce") and (model / "README.md").read_text() == "# My model\n"


def test_kinds_of_models():
    assert saved_model_kind("sidr-scifact") is SIDR and saved_model_kind("nail-scifact") is NAIL
    assert saved_model_kind("minilm") is None and saved_model_kind("org/some-model") is None
    assert encoder_family("minilm") == "dense" and encoder_family("splade-tiny") == "splade"
    assert encoder_family("hce-scifact") == "dense" and encoder_family("org/some-model") is None


def test_a_saved_model_of_another_kind_is_refused_before_anything_is_written(tmp_path):
    sidr = _saved(tmp_path / "my-sidr", SIDR)
    with pytest.raises(SemiretError, match=r"my-sidr is a saved SiDR model, which retriever 'dense' does not take; "
                                           r"search it with -r sidr-full, sidr-beta, sidr-beta-rerank"):
        DenseRetriever.build(TINY_DOCS, tmp_path / "index", model=str(sidr))
    assert not (tmp_path / "index").exists()


def test_an_encoder_given_to_a_retriever_of_saved_models_names_where_it_goes(tmp_path):
    encoder = _encoder(tmp_path / "my-encoder", "dense")
    with pytest.raises(SemiretError, match=r"is a dense encoder, which retriever 'nail-sparse' does not take; "
                                           r"search it with -r dense"):
        NailSparseRetriever.build(TINY_DOCS, tmp_path / "index", model=str(encoder))
    assert not (tmp_path / "index").exists()


def test_a_query_side_model_is_checked_before_the_index_is_built(tmp_path):
    nail = _saved(tmp_path / "my-nail", NAIL)
    with pytest.raises(SemiretError, match="saved NAIL model, which retriever 'sidr-beta' does not take"):
        SiDRBetaRetriever.build(TINY_DOCS, tmp_path / "index", model=str(nail))
    assert not (tmp_path / "index").exists()


def test_hybrid_checks_its_neural_part_model(tmp_path):
    gdr = _saved(tmp_path / "my-gdr", GDR)
    with pytest.raises(SemiretError, match="saved GDR model, which retriever 'inference-free' does not take; "
                                           "search it with -r gdr"):
        HybridRetriever.build(TINY_DOCS, tmp_path / "index", neural="inference-free", model=str(gdr))
    assert not (tmp_path / "index").exists()


def test_models_of_no_known_kind_are_left_to_the_side_that_loads_them(tmp_path):
    for model in ("org/some-model", str(tmp_path)):  # a hub id, a plain folder: no check can say
        DenseRetriever.check_model(model)
        NailSparseRetriever.check_model(model)
    DenseRetriever.check_model("splade-tiny")  # another encoder family: the user's experiment, not refused


def test_indexes_record_packaged_checkpoints_by_name_and_find_them_again(tmp_path, monkeypatch, tiny_bert):
    """An index outlives the virtual environment it was built in: a packaged checkpoint is recorded by its name,
    and a path into another installation's checkpoints (indexes built before) is found in this one's."""
    import shutil

    from semiret.indexes import open_index
    from semiret.models.checkpoints import located, model_reference
    from semiret.search import InferenceFreeRetriever, open_retriever

    shipped = tmp_path / "site-packages" / "semiret" / "checkpoints"
    shutil.copytree(tiny_bert, shipped / "tiny-splade")
    monkeypatch.setattr(packaged, "PACKAGED_CHECKPOINTS", shipped)
    assert model_reference(str(shipped / "tiny-splade")) == "tiny-splade"
    assert model_reference(str(tmp_path)) == str(tmp_path.resolve()) and model_reference("minilm") == "minilm"
    elsewhere = "/old-venv/lib/python3.10/site-packages/semiret/checkpoints/tiny-splade"
    assert located(elsewhere) == located("tiny-splade") == str(shipped / "tiny-splade")
    assert located("/old-venv/elsewhere/tiny-splade") == "/old-venv/elsewhere/tiny-splade"  # not a checkpoint path

    built = InferenceFreeRetriever.build(TINY_DOCS[:3], tmp_path / "index", model=str(shipped / "tiny-splade"))
    assert built.index.meta["analyzer"]["model"] == "tiny-splade"
    meta_file = tmp_path / "index" / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta["analyzer"]["model"] = elsewhere  # as an index built in another environment recorded it
    meta_file.write_text(json.dumps(meta))
    moved = open_retriever(tmp_path / "index")
    moved.add(TINY_DOCS[3:])  # the document side loads the model again: from this installation's checkpoints
    assert open_index(tmp_path / "index").n_docs == len(TINY_DOCS)


def test_a_checkpoint_needing_a_missing_base_model_is_not_installed(tmp_path, monkeypatch):
    root = tmp_path / "checkpoints"
    folder = _saved(root / "gdr-y", GDR)
    marker = json.loads((folder / GDR.marker).read_text())
    (folder / GDR.marker).write_text(json.dumps({**marker, "config": {"document_encoder": "minilm"}}))
    _encoder(folder / "query-encoder", "dense")
    (folder / "query-encoder" / "semiret-encoder.json").write_text(json.dumps({"family": "dense", "base": "splade-tiny"}))
    monkeypatch.setattr(packaged, "PACKAGED_CHECKPOINTS", root)
    entry = {e.name: e for e in available_models()}["gdr-y"]
    assert entry.requires == ("splade-tiny", "minilm") and entry.installed

    def missing(model):
        if model.name == "minilm":
            raise SemiretError("not installed")
        return original(model)

    original = packaged.packaged_file
    monkeypatch.setattr(packaged, "packaged_file", missing)
    entries = {e.name: e for e in available_models()}
    assert not entries["minilm"].installed and not entries["gdr-y"].installed
    table = CliRunner().invoke(app, ["models"])
    assert table.exit_code == 0 and "needs" in table.stdout  # the row says what is missing


def test_sidr_retrievers_take_any_masked_lm_as_an_untrained_vdr():
    from semiret.search import LateParametricRetriever, SiDRFullRetriever

    for retriever in (SiDRBetaRetriever, SiDRFullRetriever, LateParametricRetriever):
        retriever.check_model("splade-tiny")  # refused for a while: the documented untrained-VDR runs


def test_a_folder_named_like_a_packaged_checkpoint_does_not_shadow_it(tmp_path, monkeypatch):
    from semiret.models.checkpoints import located

    monkeypatch.chdir(tmp_path)
    (tmp_path / "inference-free-scifact").mkdir()  # e.g. an index named after its model
    assert located("inference-free-scifact") == str(packaged.PACKAGED_CHECKPOINTS / "inference-free-scifact")
