"""The HCE recipe on a tiny synthetic collection and a tiny random encoder: the three scenarios and the plain
contrastive baseline, EM co-training's re-clustering rule, resuming, the saved dense model, bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import Crash, checkpointed_weights, recording_loss, write_beir

from semiret.data import Document
from semiret.errors import SemiretError
from semiret.methods.hce import (CoTraining, Corpus, HCETrainingConfig, HierarchyBatches, pseudo_dev_set,
                                 pseudo_query, train_hce)
from semiret.training.data import TrainingSet

WORDS = ("cat dog bird fish statin cancer heart garden morning mail letter tumour mice risk therapy growth river "
         "mountain snow rain").split()


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """40 documents of 20 words, 20 training queries (q0 has two relevant documents)."""
    rng = random.Random(0)
    docs = [Document(f"d{i}", " ".join(rng.choice(WORDS) for _ in range(20))) for i in range(40)]
    queries = {f"q{i}": " ".join(rng.choice(WORDS) for _ in range(3)) for i in range(20)}
    qrels = {f"q{i}": {f"d{2 * i}": 1} for i in range(20)}
    qrels["q0"]["d1"] = 1
    return write_beir(tmp_path_factory.mktemp("hce") / "tiny", docs, queries, qrels, split="train")


def config(collection, tiny_bert, output, **options) -> HCETrainingConfig:
    settings = dict(data=str(collection), base=str(tiny_bert), output=str(output), epochs=2, batch_size=4,
                    learning_rate=1e-3, dev_fraction=0.2, document_max_length=24, query_max_length=8, span_words=6,
                    dev_pseudo_queries=10, kmeans_iterations=5)
    return HCETrainingConfig(**{**settings, **options})


def test_joint_training_writes_a_dense_model_the_dense_retriever_searches(collection, tiny_bert, tmp_path):
    from safetensors import safe_open

    from semiret.data.collection import Collection
    from semiret.search import DenseRetriever

    summary = train_hce(config(collection, tiny_bert, tmp_path / "run"))
    assert summary["tree"] == {"branching": 4, "depth": 3, "hierarchy_levels": 2, "nodes": [1, 3, 10, 40]}
    assert summary["dev_queries"] == 4 and summary["pairs"] in (16, 17)  # 21 pairs of 20 queries, 4 held out
    assert all(set(terms) == {"S.hierarchy", "S.contrastive", "U.hierarchy", "U.contrastive"}
               for terms in summary["terms_per_epoch"])
    assert len(summary["dev_nDCG@10_per_epoch"]) == 2 and (tmp_path / "run" / "trees" / "tree-0.npz").is_file()
    model = tmp_path / "run" / "model"
    training = json.loads((model / "training.json").read_text())  # the model carries its recipe and figures
    assert training["tree"] == summary["tree"] and training["config"]["epochs"] == 2
    assert training["dev_nDCG@10_per_epoch"] == summary["dev_nDCG@10_per_epoch"]
    with safe_open(str(model / "model.safetensors"), "pt") as weights:
        assert all(weights.get_tensor(k).dtype.is_floating_point and weights.get_tensor(k).itemsize == 2
                   for k in weights.keys())
    retriever = DenseRetriever.build(list(Collection(collection).corpus()), model=str(model))
    assert len(retriever.search("cat statin", k=5)) == 5


def test_the_contrastive_baseline_trains_on_the_same_batches_without_a_tree(collection, tiny_bert, tmp_path):
    summary = train_hce(config(collection, tiny_bert, tmp_path / "run", loss="contrastive"))
    hce = train_hce(config(collection, tiny_bert, tmp_path / "hce", epochs=1))
    assert summary["tree"] is None and not (tmp_path / "run" / "trees").exists()
    assert summary["steps_per_epoch"] == hce["steps_per_epoch"] and summary["pairs"] == hce["pairs"]
    assert set(summary["terms_per_epoch"][0]) == {"S.contrastive", "U.contrastive"}
    assert all(isinstance(d, float) for d in summary["dev_nDCG@10_per_epoch"])  # measured without a tree too
    quiet = train_hce(config(collection, tiny_bert, tmp_path / "quiet", loss="contrastive", epochs=1,
                             dev_every_epoch=False))
    assert quiet["dev_nDCG@10_per_epoch"] == [None]


def test_unsupervised_training_reads_no_qrels_and_measures_pseudo_queries(collection, tiny_bert, tmp_path):
    (tmp_path / "data").mkdir()
    for name in ("corpus.jsonl", "queries.jsonl"):
        (tmp_path / "data" / name).write_bytes((collection / name).read_bytes())
    summary = train_hce(config(tmp_path / "data", tiny_bert, tmp_path / "run", scenario="unsupervised", epochs=1,
                               unsupervised_per_epoch=12))
    assert summary["pairs"] == 0 and summary["dev_queries"] == 10 and summary["steps_per_epoch"] == 3
    assert set(summary["terms_per_epoch"][0]) == {"U.hierarchy", "U.contrastive"}
    assert summary["dev_nDCG@10_initial"] is not None


def test_the_tree_is_rebuilt_only_after_an_epoch_that_improved_the_dev_metric(collection, tiny_bert, tmp_path,
                                                                             monkeypatch):
    scripted = iter([0.2, 0.3, 0.25, 0.4])  # the start, then after epochs 1, 2, 3
    monkeypatch.setattr(CoTraining, "dev_metric", lambda self, encoder, vectors: next(scripted))
    summary = train_hce(config(collection, tiny_bert, tmp_path / "run", epochs=3, batch_size=8,
                               scenario="supervised"))
    assert summary["reclustered_after_epochs"] == [1]  # epoch 2 got worse; after the last, nothing is trained
    assert sorted(p.name for p in (tmp_path / "run" / "trees").iterdir()) == ["tree-0.npz", "tree-1.npz"]
    scripted = iter([0.2, 0.3, 0.4])
    fixed = train_hce(config(collection, tiny_bert, tmp_path / "fixed", batch_size=8, scenario="supervised",
                             co_training=False))
    assert fixed["reclustered_after_epochs"] == []


def test_patience_stops_a_run_whose_dev_metric_stalls_and_a_resumed_run_stays_stopped(collection, tiny_bert,
                                                                                   tmp_path, monkeypatch):
    scripted = iter([0.2, 0.3, 0.25, 0.28])  # the start, then after epochs 1, 2, 3; epoch 4 never runs
    monkeypatch.setattr(CoTraining, "dev_metric", lambda self, encoder, vectors: next(scripted))
    options = dict(epochs=5, batch_size=8, scenario="supervised", loss="contrastive", patience=2)
    summary = train_hce(config(collection, tiny_bert, tmp_path / "run", **options))
    assert summary["dev_nDCG@10_per_epoch"] == [0.3, 0.25, 0.28] and summary["saved_epoch"] == 3
    again = train_hce(config(collection, tiny_bert, tmp_path / "run", **options))  # resumed: nothing to do
    assert again["dev_nDCG@10_per_epoch"] == [0.3, 0.25, 0.28]


def test_best_epoch_saves_the_encoder_of_the_best_dev_epoch(collection, tiny_bert, tmp_path, monkeypatch):
    from safetensors.numpy import load_file

    scripted = iter([0.2, 0.3, 0.25, 0.1])
    monkeypatch.setattr(CoTraining, "dev_metric", lambda self, encoder, vectors: next(scripted))
    saved = {}
    real_save = type(load_encoder_for(tiny_bert)).save

    def recording_save(self, path, fp16=False, max_length=None):
        saved.setdefault(Path(path).name, []).append({k: v.detach().clone() for k, v in self.state_dict().items()})
        return real_save(self, path, fp16, max_length)

    monkeypatch.setattr(type(load_encoder_for(tiny_bert)), "save", recording_save)
    summary = train_hce(config(collection, tiny_bert, tmp_path / "run", epochs=3, batch_size=8,
                               scenario="supervised", loss="contrastive", best_epoch=True))
    assert summary["saved_epoch"] == 1 and len(saved["best-model"]) == 1 and "model" not in saved
    weights = load_file(str(tmp_path / "run" / "model" / "model.safetensors"))
    first_epoch = saved["best-model"][0]
    key = next(k for k in weights if k.endswith("encoder.layer.0.attention.self.query.weight"))
    expected = next(v for k, v in first_epoch.items() if k.endswith("encoder.layer.0.attention.self.query.weight"))
    assert np.allclose(weights[key].astype(np.float32), expected.half().float().numpy())
    again = train_hce(config(collection, tiny_bert, tmp_path / "run", epochs=3, batch_size=8,
                             scenario="supervised", loss="contrastive", best_epoch=True))  # finished: nothing to do
    assert again["saved_epoch"] == 1 and (tmp_path / "run" / "best-model").is_dir()
    assert load_file(str(tmp_path / "run" / "model" / "model.safetensors"))[key].tobytes() == weights[key].tobytes()
    with pytest.raises(SemiretError, match="need a dev set"):
        train_hce(config(collection, tiny_bert, tmp_path / "x", best_epoch=True, dev_fraction=0))


def test_averaging_with_the_base_after_training(collection, tiny_bert, tmp_path):
    """--average-with-base S: the saved encoder is (1 - S) x trained + S x base (S = 1: the base itself)."""
    options = dict(epochs=1, batch_size=8, scenario="supervised", loss="contrastive")
    trained = train_hce(config(collection, tiny_bert, tmp_path / "trained", **options))
    averaged = train_hce(config(collection, tiny_bert, tmp_path / "half", average_with_base=0.5, **options))
    assert averaged["averaged_with_base"] == 0.5 and "averaged_with_base" not in trained
    base = load_encoder_for(tiny_bert).state_dict()
    own = load_encoder_for(tmp_path / "trained" / "model").state_dict()
    half = load_encoder_for(tmp_path / "half" / "model").state_dict()
    key = "backbone.encoder.layer.1.output.dense.weight"
    assert not torch.allclose(own[key], base[key], atol=1e-4)
    assert torch.allclose(half[key], (own[key] + base[key]) / 2, atol=2e-3)  # fp16 checkpoints
    with pytest.raises(SemiretError, match="average_with_base"):
        train_hce(config(collection, tiny_bert, tmp_path / "x", average_with_base=1.5))


def load_encoder_for(model):
    from semiret.models.encoders import load_encoder

    return load_encoder(str(model), "dense")


@pytest.mark.parametrize("cached_negatives", [False, True])
def test_a_resumed_run_ends_where_an_uninterrupted_one_does(collection, tiny_bert, tmp_path, monkeypatch,
                                                          cached_negatives):
    """Interrupted in the second epoch, after the first re-clustered the corpus: the resumed run reloads that
    tree and its trained centroids (and, with cached negatives, the corpus embedding of the first epoch)."""
    from semiret.training.hierarchy import HierarchyLoss

    scripted = {"whole": iter([0.1, 0.5, 0.6]), "resumed": iter([0.1, 0.5, 0.6])}

    def patch(crash_at=None):
        torch.manual_seed(0)  # the tiny model's unused pooler is drawn at random when the encoder loads
        monkeypatch.undo()
        monkeypatch.setattr(CoTraining, "dev_metric",
                            lambda self, encoder, vectors: next(scripted[self.trees.parent.name]))
        return recording_loss(monkeypatch, HierarchyLoss, crash_at)

    whole = patch()
    options = {"cached_negatives": cached_negatives}
    reference = train_hce(config(collection, tiny_bert, tmp_path / "whole", **options))
    steps = len(whole) // 2
    patch(crash_at=steps + 1)
    with pytest.raises(Crash):
        train_hce(config(collection, tiny_bert, tmp_path / "resumed", **options))
    resumed = patch()
    again = train_hce(config(collection, tiny_bert, tmp_path / "resumed", **options))
    assert reference["reclustered_after_epochs"] == again["reclustered_after_epochs"] == [1]
    assert resumed == pytest.approx(whole[steps:], rel=1e-4)
    difference = np.abs(checkpointed_weights(tmp_path / "resumed") - checkpointed_weights(tmp_path / "whole"))
    assert difference.mean() < 1e-6


def test_cached_negatives_are_the_corpus_embedding_of_the_last_epoch(collection, tiny_bert, tmp_path, monkeypatch):
    """Only the batch's positives are encoded in a step; the negatives are read from the corpus as the encoder
    embedded it before the first epoch, then after each (the dev metric's embedding, made even without a
    dev figure wanted)."""
    from semiret.training.hierarchy import HierarchyLoss

    refreshed, encoded = [], []
    refresh = HierarchyLoss.refresh_negatives
    monkeypatch.setattr(HierarchyLoss, "refresh_negatives",
                        lambda self, vectors: refreshed.append(vectors.copy()) or refresh(self, vectors))
    monkeypatch.setattr(CoTraining, "embed", lambda self, encoder, embed=CoTraining.embed:
                        encoded.append(len(self.corpus.documents)) or embed(self, encoder))
    run = tmp_path / "run"
    summary = train_hce(config(collection, tiny_bert, run, cached_negatives=True, dev_every_epoch=False,
                               co_training=False, epochs=3, scenario="supervised"))
    assert len(refreshed) == 3 and encoded == [40, 40, 40]  # the start, after epochs 1 and 2 (not the last)
    assert not np.allclose(refreshed[0], refreshed[1])  # each refresh is the trained encoder's
    assert sorted(p.name for p in run.glob("negative-vectors-*.npy")) == ["negative-vectors-1.npy",
                                                                           "negative-vectors-2.npy"]
    np.testing.assert_allclose(np.load(run / "negative-vectors-2.npy"), refreshed[2])
    refreshed.clear()
    longer = train_hce(config(collection, tiny_bert, run, cached_negatives=True, dev_every_epoch=False,
                              co_training=False, epochs=4, scenario="supervised"))  # a finished run given one more
    assert len(longer["loss_per_epoch"]) == 4
    np.testing.assert_allclose(refreshed[0], np.load(run / "negative-vectors-2.npy"))  # epoch 2's: the 3rd kept none
    assert summary["config"]["negative_gradients"] is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert config(collection, tiny_bert, tmp_path, cached_negatives=True).resolved().negative_gradients is False


def test_gradients_through_the_negatives_default_to_where_training_runs(collection, tiny_bert, tmp_path, monkeypatch):
    """The paper's loss (gradients through the sampled negatives) on a GPU, the half-cost variant on a CPU;
    an explicit choice stands either way."""
    assert config(collection, tiny_bert, tmp_path, device="cpu").resolved().negative_gradients is False
    assert config(collection, tiny_bert, tmp_path, device="cpu", negative_gradients=True).resolved().negative_gradients
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert config(collection, tiny_bert, tmp_path).resolved().negative_gradients is True
    assert config(collection, tiny_bert, tmp_path, negative_gradients=False).resolved().negative_gradients is False


def test_runs_of_other_seeds_hold_out_the_same_dev_queries(collection, tiny_bert, tmp_path, monkeypatch):
    """The dev split is drawn with --dev-seed, not the run's seed: a seed ensemble is judged (and souped) on
    queries none of its runs trained on."""
    import semiret.methods.hce as hce

    splits, split_dev = [], hce.split_dev

    def recorded(training_set, fraction, seed):
        splits.append(sorted(split_dev(training_set, fraction, seed)[1]))
        raise Crash

    monkeypatch.setattr(hce, "split_dev", recorded)
    for seed in (1, 2):
        with pytest.raises(Crash):
            train_hce(config(collection, tiny_bert, tmp_path / f"seed{seed}", seed=seed))
    assert splits[0] == splits[1] and len(splits[0]) == 4


def test_batches_mix_pairs_and_pseudo_queries_and_exclude_other_positives(collection):
    from semiret.data.collection import Collection

    tiny = Collection(collection)
    corpus = Corpus(list(tiny.corpus()))
    training_set = TrainingSet.from_collection(tiny, "train")
    batches = HierarchyBatches(corpus, training_set, 4, True, 3, None, 6).epoch(random.Random(0))
    assert all(len(b.items.supervised) <= 4 and len(b.items.unsupervised) == 3 for b in batches)
    rows = [e.document for b in batches for e in b.items.unsupervised]
    assert len(rows) == len(set(rows))  # a shuffled cycle through the corpus: no document twice in 18
    q0 = [e for b in batches for e in b.items.supervised if e.query == tiny.queries()["q0"]]
    assert sorted(e.document for e in q0) == [0, 1] and sorted(e.excluded for e in q0) == [(0,), (1,)]
    alone = HierarchyBatches(corpus, None, 8, True, None, None, 6).epoch(random.Random(0))
    assert [len(b.items.unsupervised) for b in alone] == [8] * 5 and not alone[0].items.supervised


def test_no_batch_holds_a_document_twice_where_the_shuffled_cycle_starts_again():
    """The pseudo-queries' documents are a shuffled cycle through the corpus; a batch that took the end of one cycle
    and the start of the next held a document twice (18 of 150 joint batches): its own in-batch negative. Every
    batch is distinct documents, and every document is drawn as often as before."""
    from semiret.training.data import TrainingPair

    documents = [Document(f"d{i}", " ".join(["word"] * 20)) for i in range(7)]
    pairs = [TrainingPair(f"q{q}", "word word", documents[q % 7]) for q in range(20)]
    training_set = TrainingSet(pairs, {p.query_id: {p.positive.id} for p in pairs}, {d.id: d for d in documents})
    corpus = Corpus(documents)
    for seed in range(10):  # 20 joint batches of one pair and 3 pseudo-queries: 60 of 7 documents
        batches = HierarchyBatches(corpus, training_set, 1, True, 3, None, 6).epoch(random.Random(seed))
        rows = [[e.document for e in b.items.unsupervised] for b in batches]
        assert all(len(set(r)) == len(r) == 3 for r in rows), (seed, rows)
        drawn = np.bincount([d for r in rows for d in r], minlength=7)
        assert drawn.sum() == 60 and drawn.max() - drawn.min() <= 2, (seed, drawn)
    wide = HierarchyBatches(corpus, training_set, 10, True, 10, None, 6).epoch(random.Random(0))
    assert all(sorted(e.document for e in b.items.unsupervised) == list(range(7)) for b in wide)  # at most all


def test_a_pseudo_query_is_a_span_of_its_document():
    document = Document("d", " ".join(f"w{i}" for i in range(200)))
    query = pseudo_query(document, 64, random.Random(0)).split()
    assert len(query) == 64 and " ".join(query) in document.text
    assert len(pseudo_query(Document("s", "a b c d e f"), 64, random.Random(0)).split()) == 3


def test_pseudo_query_kinds_title_dropout_and_span_fallback():
    titled = Document("t", " ".join(f"w{i}" for i in range(200)), title="  A claim about w7  ")
    untitled = Document("u", " ".join(f"v{i}" for i in range(200)))
    assert pseudo_query(titled, 64, random.Random(0), "title") == "A claim about w7"
    assert pseudo_query(untitled, 64, random.Random(0), "title") == pseudo_query(untitled, 64, random.Random(0))
    assert pseudo_query(titled, 64, random.Random(0), "dropout") == titled.full_text  # SimCSE: the text itself
    corpus = Corpus([titled, untitled])
    queries = {e.query for b in HierarchyBatches(corpus, None, 2, True, None, None, 6, "title").epoch(random.Random(0))
               for e in b.items.unsupervised}
    assert "A claim about w7" in queries and len(queries) == 2
    dev_queries, dev_qrels = pseudo_dev_set(corpus, 2, 6, 0)  # spans: a title is inside its own document
    assert all(len(q.split()) == 6 for q in dev_queries.values()) and dev_qrels == {"dev-0": {"t": 1}, "dev-1": {"u": 1}}


@pytest.mark.parametrize("options, message", [
    ({"dev_fraction": 0.01}, "dev split has no qrels"),
    ({"branching": 64}, "smaller than the branching"),
    ({"hierarchy_levels": 3}, "deeper"),
    ({"scenario": "semi"}, "scenario"),
    ({"scenario": "unsupervised", "pseudo_queries": "summary"}, "pseudo-queries must be one of span, dropout, title"),
    ({"branching": 1}, "at least 2"),
    ({"scenario": "unsupervised", "batch_size": 10_000}, "too few to sample 4 negatives beside"),
    ({"cached_negatives": True, "loss": "contrastive"}, "--cached-negatives"),
    ({"cached_negatives": True, "negative_gradients": True}, "--cached-negatives"),
    ({"matryoshka_dims": "32,0"}, "--matryoshka-dims: every dimension is a positive whole number"),
    ({"matryoshka_dims": "32,16", "matryoshka_weights": "1"}, "one weight per dimension"),
])
def test_bad_input_fails_before_the_encoder_loads(collection, tiny_bert, tmp_path, monkeypatch, options, message):
    import semiret.models.encoders as encoders

    def no_encoder(*args, **kwargs):
        raise AssertionError("the encoder loaded")

    monkeypatch.setattr(encoders, "load_encoder", no_encoder)
    with pytest.raises(SemiretError, match=message):
        train_hce(config(collection, tiny_bert, tmp_path / "run", **options))
    assert not (tmp_path / "run").exists()


def test_a_branching_as_large_as_the_corpus_is_warned_of_before_the_encoder_loads(collection, tiny_bert, tmp_path,
                                                                                   monkeypatch, caplog):
    import semiret.models.encoders as encoders
    from semiret.data import Collection

    def no_encoder(*args, **kwargs):
        raise AssertionError("the encoder loaded")

    monkeypatch.setattr(encoders, "load_encoder", no_encoder)
    n = len(list(Collection(collection).corpus()))
    with caplog.at_level("WARNING"), pytest.raises(AssertionError, match="the encoder loaded"):
        train_hce(config(collection, tiny_bert, tmp_path / "run", branching=n, hierarchy_levels=0))
    assert f"with b = {n} the tree over {n} documents has one level" in caplog.text


def test_a_run_stopped_in_its_first_epoch_resumes_with_its_first_tree(collection, tiny_bert, tmp_path, monkeypatch):
    from semiret.training.hierarchy import HierarchyLoss

    recording_loss(monkeypatch, HierarchyLoss, crash_at=1)
    with pytest.raises(Crash):
        train_hce(config(collection, tiny_bert, tmp_path / "run", epochs=1, scenario="supervised"))
    monkeypatch.undo()
    first = (tmp_path / "run" / "trees" / "tree-0.npz").stat().st_mtime_ns
    clustered = []
    monkeypatch.setattr(CoTraining, "cluster", lambda self, vectors, epoch: clustered.append(epoch))
    train_hce(config(collection, tiny_bert, tmp_path / "run", epochs=1, scenario="supervised"))
    assert clustered == [] and (tmp_path / "run" / "trees" / "tree-0.npz").stat().st_mtime_ns == first


def test_a_run_stopped_in_its_first_epoch_and_started_with_other_options_builds_its_tree_again(
        collection, tiny_bert, tmp_path, monkeypatch, caplog):
    """It reused the first run's tree (and dev set) whatever the new options; a run with a checkpoint, whose
    weights trained against the old tree, is told to keep its options or start again."""
    from semiret.training.hierarchy import HierarchyLoss

    run = tmp_path / "run"
    recording_loss(monkeypatch, HierarchyLoss, crash_at=1)
    with pytest.raises(Crash):
        train_hce(config(collection, tiny_bert, run, epochs=1, scenario="supervised", kmeans_iterations=3))
    monkeypatch.undo()
    clustered, cluster = [], CoTraining.cluster
    monkeypatch.setattr(CoTraining, "cluster",
                        lambda self, vectors, epoch: clustered.append(epoch) or cluster(self, vectors, epoch))
    with caplog.at_level("WARNING"):
        train_hce(config(collection, tiny_bert, run, epochs=1, scenario="supervised", kmeans_iterations=5))
    assert clustered[0] == 0 and "kmeans_iterations: 3 -> 5): it is made again" in caplog.text
    with pytest.raises(SemiretError, match=r"other options than this run's \(kmeans_iterations: 5 -> 7\).*--no-resume"):
        train_hce(config(collection, tiny_bert, run, epochs=1, scenario="supervised", kmeans_iterations=7))


def test_the_mined_negatives_baseline_mines_with_the_starting_encoder(collection, tiny_bert, tmp_path):
    from semiret.data.collection import Collection
    from semiret.models.encoders import load_encoder

    summary = train_hce(config(collection, tiny_bert, tmp_path / "run", loss="mined", epochs=1, mining_depth=6))
    assert summary["tree"] is None
    mined = np.load(tmp_path / "run" / "mining-vectors.npy")
    texts = [d.full_text for d in Collection(collection).corpus()]

    def embedded_by(model):  # the corpus as the recipe embeds it, at its document length
        encoder = load_encoder(str(model), "dense", max_length=summary["config"]["document_max_length"])
        return encoder.encode_document(texts, batch_size=64)

    starting = embedded_by(tiny_bert)
    assert mined.shape == (40, starting.shape[1])
    np.testing.assert_allclose(mined, starting, rtol=1e-4, atol=1e-5)
    trained = embedded_by(tmp_path / "run" / "model")
    assert not np.allclose(trained, starting, rtol=1e-4, atol=1e-5)  # the trained encoder's would fail the check above
    assert set(summary["terms_per_epoch"][0]) == {"S.contrastive", "U.contrastive"}
    assert all(isinstance(d, float) for d in summary["dev_nDCG@10_per_epoch"])  # measured without a tree too
    quiet = train_hce(config(collection, tiny_bert, tmp_path / "quiet", loss="contrastive", epochs=1,
                             dev_every_epoch=False))
    assert quiet["dev_nDCG@10_per_epoch"] == [None]


def test_matryoshka_training_sums_the_loss_over_prefixes_and_records_the_dimensions(collection, tiny_bert, tmp_path):
    from semiret.models.encoders import load_encoder

    summary = train_hce(config(collection, tiny_bert, tmp_path / "run", epochs=1, matryoshka_dims="32,16,8"))
    assert summary["matryoshka_dims"] == [32, 16, 8] and summary["matryoshka_weights"] == [1.0, 1.0, 1.0]
    terms = summary["terms_per_epoch"][0]  # the hierarchy loss at each prefix, and its terms summed over them
    assert {"loss@32", "loss@16", "loss@8", "S.hierarchy", "U.contrastive"} <= set(terms)
    assert summary["loss_per_epoch"][0] == pytest.approx(terms["loss@32"] + terms["loss@16"] + terms["loss@8"],
                                                         rel=1e-3)
    model = tmp_path / "run" / "model"
    assert json.loads((model / "training.json").read_text())["matryoshka_dims"] == [32, 16, 8]
    assert json.loads((model / "semiret-encoder.json").read_text())["matryoshka_dims"] == [32, 16, 8]
    assert load_encoder(str(model), "dense", truncate_dim=8).matryoshka_dims == [32, 16, 8]


def test_matryoshka_dimensions_wider_than_the_encoder_fail_before_the_corpus_is_embedded(collection, tiny_bert,
                                                                                        tmp_path, monkeypatch):
    def no_embedding(*args, **kwargs):
        raise AssertionError("the corpus was embedded")

    monkeypatch.setattr(CoTraining, "embed", no_embedding)
    with pytest.raises(SemiretError, match="embeds in 32 dimensions, fewer than 64"):
        train_hce(config(collection, tiny_bert, tmp_path / "run", matryoshka_dims="64,16"))
