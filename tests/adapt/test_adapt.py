"""``semiret adapt`` on a tiny corpus and tiny random models: both model kinds end to end, the keep-or-reject
rule, the corpus check of an adapted model, bad input before any training."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from helpers import MSMARCO_IDF, write_beir, write_jsonl

from semiret.data import Document
from semiret.data.packaged import PACKAGED_CHECKPOINTS
from semiret.errors import SemiretError
from semiret.methods import adapt as adapt_module
from semiret.methods.adapt import AdaptConfig, adapt
from semiret.models.checkpoints import ADAPTED_CORPUS_FILE, check_adapted_corpus, corpus_fingerprint

WORDS = ("cat dog bird fish statin cancer heart garden morning mail letter tumour mice risk therapy growth river "
         "mountain snow rain").split()


def random_documents(count: int, prefix: str = "d", seed: int = 0) -> list[Document]:
    rng = random.Random(seed)
    return [Document(f"{prefix}{i}", ". ".join(" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(3)))
            for i in range(count)]


@pytest.fixture
def small_corpora(monkeypatch):
    monkeypatch.setattr(adapt_module, "MIN_DOCUMENTS", 20)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_beir(tmp_path_factory.mktemp("adapt") / "mine", random_documents(40), {}, {}, split="test")


@pytest.fixture(scope="module")
def inference_free_start(tiny_bert, tmp_path_factory):
    from semiret.methods.inference_free import load_idf
    from semiret.models.inference_free import InferenceFreeModel
    from semiret.models.splade import SpladeEncoder

    weights, source = load_idf(str(MSMARCO_IDF), str(tiny_bert))
    model = InferenceFreeModel(SpladeEncoder.from_pretrained(str(tiny_bert), max_length=32), weights, "idf", source)
    return model.save(tmp_path_factory.mktemp("if-start") / "model", max_length=32)  # fp16, as packaged


@pytest.fixture(scope="module")
def dense_start(tiny_bert, tmp_path_factory):
    from semiret.models.encoders import load_encoder

    return load_encoder(str(tiny_bert), "dense", max_length=32).save(tmp_path_factory.mktemp("dense") / "model")


@pytest.fixture(scope="module")
def sidr_start(tiny_bert, tmp_path_factory):
    from semiret.models.sidr import SiDRModel

    model = SiDRModel.initialise(str(tiny_bert), top_k=30000, query_max_length=16, document_max_length=32)
    return model.save(tmp_path_factory.mktemp("sidr") / "model")


def the_adapted_model_wins(monkeypatch) -> list[dict]:
    """The check's figures as measured, except the starting model's nDCG@10 (the first call's), which reads 0: the
    adapted model is kept whatever tiny random models score (they often score the start higher). The figures
    measured, in call order, are returned."""
    measure, measured = adapt_module.known_item_figures, []

    def figures(run, qrels):
        measured.append(measure(run, qrels))
        return {**measured[-1], "nDCG@10": 0.0} if len(measured) == 1 else measured[-1]

    monkeypatch.setattr(adapt_module, "known_item_figures", figures)
    return measured


def copy_with_search_settings(kind, model, copy, search: dict):
    """A copy of a saved model whose marker records ``search`` settings, as packaged models do."""
    import shutil

    shutil.copytree(model, copy)
    path, meta = kind.read(str(copy))
    kind.write_marker(path, **{**meta, "search": search})
    return copy


def settings(corpus, model, output, **options) -> AdaptConfig:
    return AdaptConfig(**{**dict(data=str(corpus), model=str(model), output=str(output), epochs=1,
                                 queries_per_epoch=8, batch_size=4, max_length=24, check_queries=12), **options})


def test_an_adapted_inference_free_model_is_kept_indexed_and_bound_to_its_corpus(
        corpus, inference_free_start, tiny_bert, tmp_path, small_corpora, monkeypatch):
    from semiret.search.retrievers import open_retriever, retriever_class

    measured = the_adapted_model_wins(monkeypatch)
    output = tmp_path / "adapted"
    report = adapt(settings(corpus, inference_free_start, output, teachers=f"dense:{tiny_bert},bm25"))
    assert report["kind"] == "inference-free" and report["estimate_seconds"] > 0
    check = report["check"]
    assert set(check["start"]) == set(check["adapted"]) == {"nDCG@10", "R@100"}
    reported = [{name: round(value, 4) for name, value in figures.items()} for figures in measured]  # kept by these
    assert len(measured) == 3 and check["start"] == {**reported[0], "nDCG@10": 0.0} and check["adapted"] == reported[1]
    assert report["kept"] == "adapted"
    assert set(check["hybrid_vs_model"]) == {"delta", "p_value", "worse"}
    assert report["retriever"] == ("inference-free" if check["hybrid_vs_model"]["worse"] else "hybrid")
    assert json.loads((output / "adapt.json").read_text()) == report
    assert not (output / "start-index").exists() and not (output / "hybrid-index").exists()
    served = open_retriever(output / "index")
    assert served.name == report["retriever"]
    hits = served.search("cat dog", k=3)
    assert len(hits) == 3
    assert json.loads((output / "model" / "idf.json").read_text()) != json.loads(
        (inference_free_start / "idf.json").read_text())  # the corpus's own IDF
    from semiret.methods.inference_free import load_idf

    whole, _ = load_idf("corpus", str(tiny_bert), random_documents(40))
    saved, _ = load_idf(str(output / "model" / "idf.json"), str(tiny_bert))
    assert np.allclose(saved, whole, atol=1e-4)  # of every document, the check's too (it trains on the others)
    with pytest.raises(SemiretError, match="was adapted to"):
        retriever_class("inference-free").build(random_documents(30, prefix="other", seed=1), tmp_path / "x",
                                                model=str(output / "model"))
    assert not (tmp_path / "x").exists()


def test_a_dense_encoder_is_adapted_with_hce_u(corpus, dense_start, tmp_path, small_corpora):
    report = adapt(settings(corpus, dense_start, tmp_path / "adapted"))
    assert report["kind"] == "dense"
    assert (tmp_path / "adapted" / "train" / "summary.json").is_file()
    summary = json.loads((tmp_path / "adapted" / "train" / "summary.json").read_text())
    assert summary["config"]["scenario"] == "unsupervised" and summary["pairs"] == 0
    assert summary["averaged_with_base"] == 0.5 and summary["config"]["span_words"] == 16  # the gentler settings
    assert summary["config"]["cached_negatives"] and not summary["config"]["dev_every_epoch"]  # adapt's 20 minutes


def test_a_sidr_model_trains_on_pseudo_queries_of_the_corpus_from_its_own_weights(corpus, sidr_start, tiny_bert,
                                                                                 tmp_path, small_corpora, monkeypatch):
    from semiret.models.sidr import SiDRModel
    from semiret.search.retrievers import open_retriever, retriever_class

    the_adapted_model_wins(monkeypatch)
    output = tmp_path / "adapted"
    teachers = f"dense:{tiny_bert},bm25"
    report = adapt(settings(corpus, sidr_start, output, hybrid=False, teachers=teachers))
    assert report["kind"] == "sidr" and report["retriever"] == "sidr-full" and report["estimate_seconds"] > 0
    assert report["kept"] == "adapted"
    summary = json.loads((output / "train" / "summary.json").read_text())
    assert summary["pairs"] == 8 and summary["config"]["base"] == str(sidr_start.resolve())
    assert summary["averaged_with_base"] == 0.5  # WiSE-FT with the start, as for dense encoders
    assert summary["config"]["teachers"] == teachers  # distilled from the ensemble, BM25 in it
    assert all(terms["kl"] > 0 for terms in summary["terms_per_epoch"])
    qrels = (output / "train" / "pseudo-queries" / "qrels" / "train.tsv").read_text().splitlines()[1:]
    assert len(qrels) == 8 and all(line.split("\t")[1].startswith("d") for line in qrels)
    assert open_retriever(output / "index").name == "sidr-full"
    # trained further from the start's weights, and bound to this corpus
    trained = SiDRModel.load(str(output / "model")).state_dict()
    start = SiDRModel.load(str(sidr_start)).state_dict()
    assert any(not (trained[k] == start[k]).all() for k in start)
    with pytest.raises(SemiretError, match="was adapted to"):
        retriever_class("sidr-full").build(random_documents(30, prefix="other", seed=1), tmp_path / "x",
                                           model=str(output / "model"))
    other = retriever_class("sidr-beta").build(random_documents(30, prefix="other", seed=1), tmp_path / "bot",
                                               tokenizer=str(tiny_bert))  # tokenizer-only: no model indexes it
    with pytest.raises(SemiretError, match="was adapted to"):  # nor does the adapted model search it unsaid
        other.with_options(model=str(output / "model")).search("cells", k=3)
    adapt(settings(corpus, sidr_start, output, hybrid=False, teachers=teachers, queries_per_epoch=12, resume=False))
    assert json.loads((output / "train" / "summary.json").read_text())["pairs"] == 12  # trained over, not resumed
    # started again with other options, the finished training was resumed as it was; now an error, before compute
    with pytest.raises(SemiretError, match=r"other options than this run's \(queries_per_epoch: 12 -> 16\).*--no-resume"):
        adapt(settings(corpus, sidr_start, output, hybrid=False, teachers=teachers, queries_per_epoch=16))
    assert json.loads((output / "train" / "summary.json").read_text())["pairs"] == 12
    assert (output / "adapt.json").is_file()  # the refused run changed nothing (its report was deleted first)


def test_a_gdr_model_is_trained_again_over_a_tree_of_the_corpus(corpus, tiny_gdr, tmp_path, small_corpora,
                                                                 monkeypatch):
    from semiret.models.checkpoints import GDR
    from semiret.models.gdr import Clusters
    from semiret.search.retrievers import open_retriever, retriever_class

    start = copy_with_search_settings(GDR, tiny_gdr, tmp_path / "start", {"beta": 7.0})
    output = tmp_path / "adapted"
    the_adapted_model_wins(monkeypatch)
    report = adapt(settings(corpus, start, output))
    assert report["kind"] == "gdr" and report["retriever"] in ("gdr", "hybrid") and report["estimate_seconds"] > 0
    assert report["kept"] == "adapted"
    cache = json.loads((output / "train" / "document-embeddings" / "meta.json").read_text())
    assert len(cache["chunks"]) == 1  # E_D embedded the corpus once: the start's index; training and both
    # indexes after it read the cache, and the hybrid index copies the model's index beside a new BM25
    summary = json.loads((output / "train" / "summary.json").read_text())
    assert summary["pairs"] == 8 and summary["config"]["trained_query_layers"] == 2
    assert (summary["config"]["span_words"], summary["config"]["spans_per_document"]) == (16, 2)  # adapt's spans
    assert summary["config"]["branching"] == 3 and summary["config"]["base"] == str(start.resolve() / "query-encoder")
    trained = Clusters.load(output / "train" / "model" / "clusters.npz")
    assert sorted(trained.document_ids) == sorted(f"d{i}" for i in range(40))  # a tree of this corpus, not the start's
    assert GDR.read(str(output / "train" / "model"))[1]["search"] == {"beta": 7.0}  # the start's search settings
    assert open_retriever(output / "index").name == report["retriever"]
    with pytest.raises(SemiretError, match="was adapted to"):
        retriever_class("gdr").build(random_documents(30, prefix="other", seed=1), tmp_path / "x",
                                     model=str(output / "model"))


def test_a_nail_model_goes_on_pre_training_on_the_corpus_and_keeps_its_bm25_weight(corpus, tiny_nail, tiny_bert,
                                                                                   tmp_path, small_corpora,
                                                                                   monkeypatch):
    from semiret.models.checkpoints import NAIL
    from semiret.models.nail import NailModel
    from semiret.search.retrievers import open_retriever, retriever_class

    start = copy_with_search_settings(NAIL, tiny_nail, tmp_path / "start", {"bm25_weight": 1.5})
    output = tmp_path / "adapted"
    teachers = f"dense:{tiny_bert},bm25"
    the_adapted_model_wins(monkeypatch)
    report = adapt(settings(corpus, start, output, teachers=teachers))
    assert report["kind"] == "nail" and report["retriever"] == "bm25+nail" and report["estimate_seconds"] > 0
    assert report["kept"] == "adapted"
    assert "hybrid" not in report["check"]  # BM25 is the first stage already: no fusion checked
    summary = json.loads((output / "train" / "summary.json").read_text())
    assert [stage["stage"] for stage in summary["stages"]] == ["pretrain"]  # the label-free stage alone
    assert summary["stages"][0]["pairs"] > 0 and summary["config"]["positions"] == 4  # the start's architecture
    assert summary["averaged_with_base"] == 0.5  # WiSE-FT with the start, as for dense and SiDR models
    assert summary["config"]["teachers"] == teachers  # distilled from the ensemble, BM25 in it
    assert summary["config"]["distillation_weight"] == 32  # the batch: Eq. 3 is summed over its queries
    assert all(terms["kl"] > 0 for terms in summary["stages"][0]["terms_per_epoch"])
    assert NAIL.read(str(output / "train" / "model"))[1]["search"] == {"bm25_weight": 1.5}
    served = open_retriever(output / "index")
    assert served.name == "bm25+nail" and served.query_side.bm25_weight == 1.5
    assert len(served.search("cat dog", k=3)) == 3
    # trained further from the start's weights, and bound to this corpus
    trained, begun = NailModel.load(str(output / "model")).state_dict(), NailModel.load(str(start)).state_dict()
    assert any(not (trained[k] == begun[k]).all() for k in begun)
    with pytest.raises(SemiretError, match="was adapted to"):
        retriever_class("bm25+nail").build(random_documents(30, prefix="other", seed=1), tmp_path / "x",
                                           model=str(output / "model"))


def test_a_model_worse_on_the_check_is_not_kept(corpus, inference_free_start, tiny_bert, tmp_path, small_corpora,
                                               monkeypatch):
    figures = iter([{"nDCG@10": 0.5, "R@100": 0.9}, {"nDCG@10": 0.4, "R@100": 0.95}, {"nDCG@10": 0.3, "R@100": 0.97}])
    monkeypatch.setattr(adapt_module, "known_item_figures", lambda *args: next(figures))
    monkeypatch.setattr(adapt_module, "fusion_against_model", lambda *args: {"delta": -0.2, "p_value": 0.01, "worse": True})
    output = tmp_path / "adapted"
    report = adapt(settings(corpus, inference_free_start, output, teachers="bm25"))
    assert report["kept"] == "start" and report["retriever"] == "inference-free"  # fusion significantly worse
    assert not (output / "model" / ADAPTED_CORPUS_FILE).exists()
    for name in ("model.safetensors", "idf.json"):
        assert (output / "model" / name).read_bytes() == (inference_free_start / name).read_bytes()


def test_fusion_is_worse_only_when_significantly_worse():
    from semiret.methods.adapt import fusion_against_model

    qrels = {f"q{i}": {f"d{i}": 1} for i in range(40)}
    model = {q: {f"d{i}": 2.0, "other": 1.0} for i, q in enumerate(qrels)}  # every answer first
    slightly = {**model, "q0": {"other": 2.0, "d0": 1.0}}  # one answer second
    much = {q: {"other": 2.0, f"d{i}": 1.0} for i, q in enumerate(qrels)}  # every answer second
    assert fusion_against_model(slightly, model, qrels)["worse"] is False
    verdict = fusion_against_model(much, model, qrels)
    assert verdict["worse"] is True and verdict["delta"] < 0 and verdict["p_value"] < 0.05


def test_bm25_fused_with_the_model_is_indexed_unless_the_check_finds_it_worse(
        corpus, inference_free_start, tmp_path, small_corpora, monkeypatch):
    from semiret.search.retrievers import open_retriever

    fused = [{"nDCG@10": 0.5, "R@100": 0.9}, {"nDCG@10": 0.6, "R@100": 0.9}, {"nDCG@10": 0.59, "R@100": 0.9}]
    figures = iter(fused + fused  # the English run, the German one, then the run without fusion
                   + [{"nDCG@10": 0.5, "R@100": 0.9}, {"nDCG@10": 0.6, "R@100": 0.9}])
    monkeypatch.setattr(adapt_module, "known_item_figures", lambda *args: next(figures))
    monkeypatch.setattr(adapt_module, "fusion_against_model", lambda *args: {"delta": -0.01, "p_value": 0.4, "worse": False})
    output = tmp_path / "adapted"
    report = adapt(settings(corpus, inference_free_start, output, teachers="bm25"))
    assert (report["kept"], report["retriever"]) == ("adapted", "hybrid") and "-r hybrid" in report["search"]
    served = open_retriever(output / "index")
    assert served.name == "hybrid" and len(served.search("cat dog", k=3)) == 3
    assert not (output / "hybrid-index").exists()
    assert served.index.parts["lexical"].meta["analyzer"].get("language") is None  # English by default
    german = adapt(settings(corpus, inference_free_start, tmp_path / "german", teachers="bm25", language="german"))
    assert german["retriever"] == "hybrid"
    assert open_retriever(tmp_path / "german" / "index").index.parts["lexical"].meta["analyzer"]["language"] == "de"
    unfused = adapt(settings(corpus, inference_free_start, tmp_path / "plain", teachers="bm25", hybrid=False))
    assert unfused["retriever"] == "inference-free" and "hybrid" not in unfused["check"]


def test_a_corpus_file_is_accepted_and_estimates_stop_before_training(inference_free_start, tmp_path, small_corpora):
    corpus_file = write_jsonl(tmp_path / "mine.jsonl", [d.to_record() for d in random_documents(25)])
    output = tmp_path / "adapted"
    report = adapt(settings(corpus_file, inference_free_start, output), confirm=lambda seconds: False)
    assert report["documents"] == 25 and report["estimate_seconds"] > 0
    assert not output.exists()  # an estimate alone writes nothing, not even the corpus's copy


def test_the_smallest_corpus_adapt_takes_adapts_with_the_default_check(inference_free_start, tmp_path):
    """The docs promise 500 documents; 300 check queries by default held out more than half of them and refused."""
    corpus_file = write_jsonl(tmp_path / "mine.jsonl", [d.to_record() for d in random_documents(500)])
    report = adapt(settings(corpus_file, inference_free_start, tmp_path / "o", check_queries=None),
                   confirm=lambda seconds: False)
    assert report["config"]["check_queries"] == 250
    with pytest.raises(SemiretError, match="give at most 250"):  # a number given is the user's, refused as before
        adapt(settings(corpus_file, inference_free_start, tmp_path / "o", check_queries=300))


def test_epochs_default_by_model_kind(corpus, inference_free_start, tiny_gdr, tmp_path, small_corpora):
    def epochs(model, **options):
        report = adapt(settings(corpus, model, tmp_path / "o", **{"epochs": None, **options}),
                       confirm=lambda seconds: False)
        return report["config"]["epochs"]

    # a GDR epoch trains on every document's spans and sentence: one of them; the others' epochs are 1,024 queries
    assert (epochs(tiny_gdr), epochs(inference_free_start)) == (1, 2)
    assert epochs(tiny_gdr, epochs=3) == 3
    with pytest.raises(SemiretError, match="--epochs"):
        adapt(settings(corpus, tiny_gdr, tmp_path / "o", epochs=0))  # refused, not taken for the default


def test_bad_input_fails_before_training(corpus, inference_free_start, tmp_path, monkeypatch):
    monkeypatch.setattr(adapt_module, "train_adapted", lambda *args: pytest.fail("trained"))
    with pytest.raises(SemiretError, match="adapting needs at least 500"):
        adapt(settings(corpus, inference_free_start, tmp_path / "o"))
    earlier = tmp_path / "earlier"  # an earlier run's output, whose model points to its corpus copy
    (earlier / "corpus").mkdir(parents=True)
    (earlier / "corpus" / "corpus.jsonl").write_text("the earlier corpus\n")
    (earlier / "train").mkdir()
    (earlier / "train" / "adapt-options.json").write_text("{}")  # what says an adaptation wrote the folder
    small_file = write_jsonl(tmp_path / "small.jsonl", [d.to_record() for d in random_documents(5)])
    with pytest.raises(SemiretError, match="holds 5 documents"):
        adapt(settings(small_file, inference_free_start, earlier))
    assert (earlier / "corpus" / "corpus.jsonl").read_text() == "the earlier corpus\n"
    assert sorted(p.name for p in earlier.iterdir()) == ["corpus", "train"]
    with pytest.raises(SemiretError, match="adapt never overwrites"):
        adapt(settings(corpus, "inference-free-scifact", PACKAGED_CHECKPOINTS / "inference-free-scifact" / "x"))
    for inside in (Path(inference_free_start) / "x",  # the model's own folder
                   Path(sysconfig.get_paths()["purelib"]) / "adapted-here"):  # where registry models (minilm) are installed
        with pytest.raises(SemiretError, match="adapt never overwrites"):
            adapt(settings(corpus, inference_free_start, inside))
        assert not inside.exists()
    for option, message in (({"batch_size": 0}, "--batch-size must be at least 1"),
                            ({"max_length": 0}, "--max-length must be at least 2"),
                            ({"threads": -2}, "--threads must be 0"),
                            ({"check_queries": 3}, "10 check queries \\(--check-queries\\)"),
                            ({"language": "elvish"}, "unknown language 'elvish'")):
        with pytest.raises(SemiretError, match=message):
            adapt(settings(corpus, inference_free_start, tmp_path / "numbers", **option))
        assert not (tmp_path / "numbers").exists()
    mostly_empty = random_documents(30)[:10] + [Document(f"e{i}", " ") for i in range(600)]
    empty_file = write_jsonl(tmp_path / "empty.jsonl", [d.to_record() for d in mostly_empty])
    with pytest.raises(SemiretError, match="holds 10 documents with text \\(600 of its 610 have no text\\)"):
        adapt(settings(empty_file, inference_free_start, tmp_path / "o"))
    with pytest.raises(SemiretError, match="none of them.*-r hybrid"):
        adapt(settings(corpus, "splade-tiny", tmp_path / "o"))
    with pytest.raises(SemiretError, match="which corpus"):
        adapt(AdaptConfig(output=str(tmp_path / "o")))
    for teachers, message in (("none", "give it teachers.*'none' is for SiDR"),
                              ("dense:x,bm2", "unknown teacher 'bm2'")):
        with pytest.raises(SemiretError, match=message):
            adapt(settings(corpus, inference_free_start, tmp_path / "o", teachers=teachers))
        assert not (tmp_path / "o").exists()


def test_an_output_holding_what_adapt_did_not_write_or_the_corpus_itself_is_refused(
        corpus, inference_free_start, tmp_path, monkeypatch):
    """adapt replaces its folders in --output (corpus, model, index, ...): an index of the user's there, or the
    corpus it reads, is refused before anything is read or written."""
    from semiret.search import BM25Retriever

    monkeypatch.setattr(adapt_module, "train_adapted", lambda *args: pytest.fail("trained"))
    project = tmp_path / "project"
    BM25Retriever.build(random_documents(30), project / "index")
    before = sorted(str(p) for p in project.rglob("*"))
    with pytest.raises(SemiretError, match="holds index that no adaptation wrote"):
        adapt(settings(corpus, inference_free_start, project))
    assert sorted(str(p) for p in project.rglob("*")) == before
    folder = tmp_path / "here"
    (folder / "corpus").mkdir(parents=True)
    for n, document in enumerate(random_documents(30)):
        (folder / "corpus" / f"{n}.txt").write_text(document.text)
    for data in (folder / "corpus", folder / "corpus" / "0.txt"):
        with pytest.raises(SemiretError, match="lies in .*corpus, which adapt writes"):
            adapt(settings(data, inference_free_start, folder))
    assert len(list((folder / "corpus").iterdir())) == 30
    finished = tmp_path / "finished"  # a finished run's trained model as the start of another into the same folder:
    shutil.copytree(inference_free_start, finished / "train" / "model")  # deleted with the run folder, then missed
    (finished / "train" / "adapt-options.json").write_text("{}")
    with pytest.raises(SemiretError, match=r"--model .*train.model lies in .*train, which adapt writes"):
        adapt(settings(corpus, finished / "train" / "model", finished))
    assert (finished / "train" / "model").is_dir()


def test_teachers_given_to_a_kind_that_adapts_without_them_are_named(corpus, dense_start, tmp_path, small_corpora,
                                                                     caplog):
    adapt(settings(corpus, dense_start, tmp_path / "o", teachers="bm25"), confirm=lambda seconds: False)
    assert "--teachers is for inference-free, SiDR and NAIL models: a dense model adapts without them" in caplog.text


def test_sidr_adapts_without_teachers_when_told(corpus, sidr_start, tmp_path, small_corpora, monkeypatch):
    import semiret.methods.sidr as sidr_recipe

    class Trained(Exception):
        pass

    def train_sidr(config, resume=True):
        seen.append(config)
        raise Trained

    seen = []
    monkeypatch.setattr(sidr_recipe, "train_sidr", train_sidr)
    with pytest.raises(Trained):
        adapt(settings(corpus, sidr_start, tmp_path / "a", teachers="none"))
    assert seen[0].teachers == ""  # SiDR's own loss alone
    with pytest.raises(SemiretError, match="unknown teacher 'nope'"):
        adapt(settings(corpus, sidr_start, tmp_path / "b", teachers="nope"))
    assert not (tmp_path / "b").exists()
    assert adapt_module.teacher_work(AdaptConfig(teachers="none"), 1000) == 0.0  # no teacher encodes the corpus
    assert adapt_module.teacher_work(AdaptConfig(), 1000) > 0


def test_the_corpus_check_accepts_the_corpus_and_later_additions(tmp_path):
    """Documents belong to the adapted corpus by id and text: another corpus numbered the same way (1, 2, 3, as
    classic collections are) is refused; a record of an older version (id hashes) is still read, by id."""
    mine = [Document("1", "wing flutter at supersonic speed"), Document("2", "boundary layer transition"),
            Document("3", "heat transfer in hypersonic flow")]
    model = tmp_path / "model"
    model.mkdir()
    (model / ADAPTED_CORPUS_FILE).write_text(json.dumps({"corpus": "mine", **corpus_fingerprint(mine)}))
    check_adapted_corpus(str(model), mine[:2] + [Document("new", "a later addition")])
    check_adapted_corpus(str(tmp_path), [Document("x", "anything")])  # no record: any corpus
    with pytest.raises(SemiretError, match="only 1 of the first 3"):
        check_adapted_corpus(str(model), [mine[0], Document("x", "y"), Document("z", "w")])
    same_ids = [Document("1", "library catalogues"), Document("2", "indexing languages"), mine[2]]
    with pytest.raises(SemiretError, match="only 1 of the first 3"):
        check_adapted_corpus(str(model), same_ids)
    older = tmp_path / "older"
    older.mkdir()
    id_hashes = sorted(hashlib.sha1(i.encode()).hexdigest()[:12] for i in ("1", "2", "3"))
    (older / ADAPTED_CORPUS_FILE).write_text(json.dumps({"corpus": "mine", "documents": 3, "id_hashes": id_hashes}))
    check_adapted_corpus(str(older), same_ids)  # by id, as it was written
    with pytest.raises(SemiretError, match="only 0 of the first 1"):
        check_adapted_corpus(str(older), [Document("x", "y")])


def test_the_check_s_documents_are_never_trained_on_and_empty_ones_give_no_query(tmp_path):
    """The held-out check's pseudo-queries come from documents the training's are not drawn from; a document without
    words gives neither."""
    import json

    documents = random_documents(120) + [Document(f"empty{i}", " ") for i in range(40)]
    corpus = write_beir(tmp_path / "mine", documents, {}, {}, split="test")
    config = AdaptConfig(data=str(corpus), queries_per_epoch=200, check_queries=50)
    queries, qrels = adapt_module.check_set(documents, config)
    checked = {document for judged in qrels.values() for document in judged}
    assert len(queries) == 50 and not any(d.startswith("empty") for d in checked)
    folder = adapt_module.pseudo_labelled_collection(corpus, documents, config, tmp_path / "train")
    trained = {line.split("\t")[1] for line in (folder / "qrels" / "train.tsv").read_text().splitlines()[1:]}
    assert trained and not trained & checked and len(trained) == 120 - 50
    assert all(json.loads(line)["text"].strip() for line in (folder / "queries.jsonl").read_text().splitlines())


@pytest.mark.parametrize("kind, recipe", [("inference-free", "inference_free.train_inference_free"),
                                          ("nail", "nail.train_nail"), ("dense", "hce.train_hce")])
def test_recipes_that_cut_their_own_pseudo_queries_never_see_the_check_s_documents(tmp_path, monkeypatch, kind,
                                                                                   recipe):
    """Inference-free, NAIL and dense models pre-trained on pseudo-queries of every document of the corpus, the
    check's documents too (300 of 300 on SciFact, 15 of their training queries word for word the check's): the check
    that decides whether the adapted model is kept favoured it. They train on the corpus less those documents."""
    import importlib

    from semiret.data.collection import Collection

    documents = random_documents(60)
    corpus = write_beir(tmp_path / "mine", documents, {}, {}, split="test")
    config = AdaptConfig(data=str(corpus), queries_per_epoch=20, check_queries=15)
    checked = {document for judged in adapt_module.check_set(documents, config)[1].values() for document in judged}
    module_name, function = recipe.split(".")
    seen = {}

    def recipe_called(training, resume):
        seen["corpora"] = [training.data, *getattr(training, "pretrain_corpora", [])]
        raise InterruptedError

    monkeypatch.setattr(importlib.import_module(f"semiret.methods.{module_name}"), function, recipe_called)
    monkeypatch.setattr(adapt_module, "indexing_length", lambda kind, start: 24)
    with pytest.raises(InterruptedError):
        adapt_module.train_adapted(kind, config, corpus, documents, "start", tmp_path / "train")
    for trained_on in seen["corpora"]:
        ids = {document.id for document in Collection(trained_on).corpus()}
        assert ids == {d.id for d in documents} - checked and len(checked) == 15, trained_on
