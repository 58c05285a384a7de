"""The lexical prior of inference-free models: BM25 over a document's own tokens added to its learned weights,
in training (with a second labelled collection) and at indexing, with the corpus's mean length kept for adds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from semiret.data import Collection, Document
from semiret.errors import SemiretError
from semiret.evaluation.metrics import parse_measures, score_run
from semiret.methods.inference_free import InferenceFreeTrainingConfig, train_inference_free
from semiret.models.inference_free import InferenceFreeModel
from semiret.text.bm25 import LexicalPrior
from semiret.text.wordpiece import WordPieceVocabulary
from helpers import MSMARCO_IDF, TINY_DOCS, write_beir


def test_the_prior_is_weighted_bm25_over_the_documents_own_tokens(tiny_bert):
    vocabulary = WordPieceVocabulary(str(tiny_bert))
    texts = ["cat cat dog", "dog bird bird bird mouse"]
    prior = LexicalPrior(0.5, k1=1.2, b=0.75)
    vectors = prior.vectors(vocabulary, texts).toarray()
    assert prior.avgdl == pytest.approx(4.0)  # 3 and 5 tokens
    cat, bird = vocabulary.token_ids()["cat"], vocabulary.token_ids()["bird"]
    assert vectors[0, cat] == pytest.approx(0.5 * 2.2 * 2 / (2 + 1.2 * (0.25 + 0.75 * 3 / 4)))
    assert vectors[1, bird] == pytest.approx(0.5 * 2.2 * 3 / (3 + 1.2 * (0.25 + 0.75 * 5 / 4)))
    assert vectors[0, bird] == 0 and (vectors > 0).sum() == 5
    # a later batch keeps the mean length already fixed
    prior.vectors(vocabulary, ["bird"])
    assert prior.avgdl == pytest.approx(4.0)
    with pytest.raises(SemiretError, match="lexical prior"):
        LexicalPrior(-1.0)


def test_stem_variants_count_for_each_other_among_whole_word_tokens(tiny_bert):
    vocabulary = WordPieceVocabulary(str(tiny_bert))
    ids = vocabulary.token_ids()
    assert "cat" in ids and "cats" in ids  # tiny_bert has splade-tiny's vocabulary
    plain = LexicalPrior(1.0).vectors(vocabulary, ["cats chase mice"]).toarray()[0]
    stemmed = LexicalPrior(1.0, stems=True).vectors(vocabulary, ["cats chase mice"]).toarray()[0]
    assert plain[ids["cat"]] == 0 and stemmed[ids["cat"]] > 0
    assert stemmed[ids["cats"]] == pytest.approx(plain[ids["cats"]])  # its own token counted once
    assert (stemmed > 0).sum() > (plain > 0).sum()


@pytest.fixture(scope="module")
def prior_run(tmp_path_factory, tiny_bert):
    root = write_beir(tmp_path_factory.mktemp("lp") / "tiny", split="train")
    other = write_beir(tmp_path_factory.mktemp("lp") / "other", docs=TINY_DOCS[:4],
                       queries={"o1": "cats in the garden"}, qrels={"o1": {"d1": 1}}, split="train")
    output = tmp_path_factory.mktemp("lp-run") / "run"
    config = InferenceFreeTrainingConfig(
        data=str(root), output=str(output), base=str(tiny_bert), idf=str(MSMARCO_IDF), teachers="bm25",
        pretrain_corpora=["none"], finetune_also=[str(other)], finetune_epochs=1, batch_size=2, candidates=2,
        mining_depth=3, flops_sample=16, finetune_max_length=32, lexical_prior=0.5)
    return root, output, train_inference_free(config)


def test_training_with_the_prior_and_a_second_collection_records_both(prior_run):
    root, output, summary = prior_run
    finetune = summary["stages"][-1]
    assert finetune["queries"] == 3 + 1  # both collections' training queries
    assert np.isfinite(finetune["loss_per_epoch"][-1])
    meta = json.loads((output / "model" / "inference-free.json").read_text())
    assert meta["lexical_prior"] == {"weight": 0.5, "k1": 1.5, "b": 0.75, "stems": True}
    assert InferenceFreeModel.load(str(output / "model")).lexical_prior.weight == 0.5


def test_the_index_adds_the_prior_with_the_corpus_mean_length_and_keeps_it_for_adds(prior_run, tmp_path):
    from semiret.search.neural import InferenceFreeRetriever

    root, output, _ = prior_run
    docs = list(Collection(root).corpus())
    model = str(output / "model")
    with_prior = InferenceFreeRetriever.build(docs, tmp_path / "prior", model=model, threshold=0.0)
    without = InferenceFreeRetriever.build(docs, tmp_path / "none", model=model, threshold=0.0, lexical_prior=0.0)
    recorded = with_prior.index.meta["analyzer"]["lexical_prior"]
    vocabulary = WordPieceVocabulary(str(model))
    lengths = [len(vocabulary.encode(d.full_text)) for d in docs]
    assert recorded["avgdl"] == pytest.approx(np.mean(lengths))
    assert "lexical_prior" not in without.index.meta["analyzer"]
    # score with the prior = learned score + 0.5 x BM25 over tokens, for every document
    query = "statin reduces cancer risks"  # stem variants of the documents' words
    assert recorded["stems"] and recorded["weight"] == 0.5
    expected_prior = LexicalPrior(**recorded).vectors(vocabulary, [d.full_text for d in docs])
    encoded = with_prior.encode_query(query)
    q = np.zeros(expected_prior.shape[1], np.float32)
    q[encoded.terms] = encoded.weights
    bm25_part = dict(zip([d.id for d in docs], expected_prior @ q))
    learned = without.search([query], k=len(docs))
    fused = with_prior.search([query], k=len(docs))
    learned_scores = dict(zip(learned.ids[0], learned.scores[0]))
    for doc_id, score in zip(fused.ids[0], fused.scores[0]):
        assert score == pytest.approx(learned_scores.get(doc_id, 0.0) + bm25_part[doc_id], rel=1e-4, abs=1e-4)
    # an added document is weighted with the mean length the index recorded, not its own
    reopened = InferenceFreeRetriever.open(tmp_path / "prior")
    reopened.add([Document("long", " ".join(["statins"] * 40))])
    assert reopened.index.meta["analyzer"]["lexical_prior"]["avgdl"] == recorded["avgdl"]


def test_training_from_a_model_with_a_prior_keeps_it_unless_told(prior_run, tmp_path):
    """What ``semiret adapt`` relies on: a model trained on from a saved one keeps the prior it was trained with."""
    root, output, summary = prior_run
    common = {**summary["config"], "base": str(output / "model"), "finetune_also": None,
              "choose_document_threshold": False}
    for run, given, expected in (("kept", None, 0.5), ("dropped", 0.0, None)):
        train_inference_free(InferenceFreeTrainingConfig(**{**common, "output": str(tmp_path / run),
                                                            "lexical_prior": given}))
        meta = json.loads((tmp_path / run / "model" / "inference-free.json").read_text())
        assert (meta["lexical_prior"] or {}).get("weight") == expected


def test_a_prior_chosen_on_another_collection_after_training_is_recorded_and_indexed(prior_run, tmp_path):
    """``--choose-lexical-prior``: the model trains without a prior, then the weight that another collection's
    training queries prefer (the smallest within 0.001 of the best) is recorded and applied at indexing."""
    from semiret.methods.inference_free import LEXICAL_PRIOR_WEIGHTS, lexical_prior_sweep
    from semiret.search.neural import InferenceFreeRetriever

    root, _, summary = prior_run
    other = write_beir(tmp_path / "other", docs=TINY_DOCS, split="train",
                       queries={"o1": "cats in the garden", "o2": "statins and cancer"},
                       qrels={"o1": {"d1": 1}, "o2": {"d2": 1}})
    config = {**summary["config"], "output": str(tmp_path / "run"), "finetune_also": None, "lexical_prior": None,
              "choose_lexical_prior": str(other)}
    trained = train_inference_free(InferenceFreeTrainingConfig(**config))
    meta = json.loads((tmp_path / "run" / "model" / "inference-free.json").read_text())
    choice = meta["lexical_prior_choice"]
    assert trained["lexical_prior_choice"] == choice and choice["split"] == "train"
    weights = [row["weight"] for row in choice["rows"]]
    assert weights == list(LEXICAL_PRIOR_WEIGHTS) and weights[0] == 0.0
    best = max(row["nDCG@10"] for row in choice["rows"])
    chosen = min(w for w, row in zip(weights, choice["rows"]) if row["nDCG@10"] >= best - 0.001)
    assert (meta["lexical_prior"] or {}).get("weight", 0.0) == chosen
    # the sweep is what the search finds: the chosen weight's row equals a search of the index it builds
    model = str(tmp_path / "run" / "model")
    forced = 0.5 if chosen == 0.0 else chosen
    (row,) = lexical_prior_sweep(model, str(other), "train", [forced], measures=("nDCG@10",))
    index = InferenceFreeRetriever.build(Collection(other).corpus(), tmp_path / "index", model=model,
                                         lexical_prior=forced)
    assert index.index.meta["analyzer"]["lexical_prior"]["weight"] == forced
    queries = Collection(other).queries("train")
    run = index.search(list(queries.values()), k=100).as_run(list(queries))
    figures = score_run(run, Collection(other).qrels("train"), parse_measures(["nDCG@10"]))
    assert figures["nDCG@10"] == pytest.approx(row["nDCG@10"], abs=1e-4)


def test_choosing_a_prior_is_refused_where_it_would_tune_on_test_or_rewrite_a_packaged_model(prior_run, tmp_path):
    from semiret.methods.inference_free import choose_lexical_prior, record_lexical_prior

    root, output, summary = prior_run
    common = {**summary["config"], "output": str(tmp_path / "run"), "finetune_also": None,
              "choose_lexical_prior": str(root)}
    with pytest.raises(SemiretError, match="trains with one"):  # the run's own prior (0.5) is trained in
        train_inference_free(InferenceFreeTrainingConfig(**common))
    with pytest.raises(SemiretError, match="trains with one"):  # --base's recorded prior, inherited
        train_inference_free(InferenceFreeTrainingConfig(**{**common, "base": str(output / "model"),
                                                            "lexical_prior": None}))
    with pytest.raises(SemiretError, match="test queries"):
        train_inference_free(InferenceFreeTrainingConfig(**{**common, "lexical_prior": 0.0, "split": "test"}))
    with pytest.raises(SemiretError, match="frozen base"):
        train_inference_free(InferenceFreeTrainingConfig(**{**common, "lexical_prior": 0.0,
                                                            "learn_query_weights": True,
                                                            "freeze_document_encoder": True}))
    assert not (tmp_path / "run" / "model").exists()  # each refused before training
    with pytest.raises(SemiretError, match="test queries"):
        choose_lexical_prior(str(output / "model"), str(root), "test")
    with pytest.raises(SemiretError, match="packaged model"):
        record_lexical_prior("inference-free-scifact", LexicalPrior(1.0))
