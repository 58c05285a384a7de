"""GDR on a tiny synthetic collection and a tiny random encoder: the prefix tree and constrained beam search,
the loss, the recipe (resuming, fp16, the per-document baseline, held-out documents), the ``gdr`` retriever
(scoring, documents added and deleted without retraining) and bad input."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from helpers import TINY_DOCS, Crash, checkpointed_weights, recording_loss, write_beir

from semiret.data import Document
from semiret.errors import SemiretError
from semiret.methods.gdr import GDRBatches, GDRTrainingConfig, train_gdr
from semiret.models.gdr import Clusters, GDRConfig, GDRModel, PrefixTree
from semiret.training.gdr import GDRLoss
from semiret.training.hierarchy import HierarchyExample

WORDS = ("cat dog bird fish statin cancer heart garden morning mail letter tumour mice risk therapy growth river "
         "mountain snow rain").split()


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """40 documents of two sentences, 20 training and 6 test queries (q0 has two relevant documents)."""
    rng = random.Random(0)

    def sentence():
        return " ".join(rng.choice(WORDS) for _ in range(10)) + "."

    docs = [Document(f"d{i}", f"{sentence()} {sentence()}") for i in range(40)]
    queries = {f"q{i}": " ".join(rng.choice(WORDS) for _ in range(3)) for i in range(26)}
    root = write_beir(tmp_path_factory.mktemp("gdr") / "tiny", docs, queries,
                      {f"q{i}": {f"d{2 * i}": 1} for i in range(20)} | {"q0": {"d0": 1, "d1": 1}}, split="train")
    write_beir(root, docs, queries, {f"q{i}": {f"d{i}": 1} for i in range(20, 26)}, split="test")
    return root


def config(collection, tiny_bert, output, **options) -> GDRTrainingConfig:
    settings = dict(data=str(collection), base=str(tiny_bert), output=str(output), epochs=2, batch_size=8,
                    branching=3, leaf_size=6, heads=2, decoder_layers=1, query_max_length=12, span_words=5,
                    document_max_length=24, kmeans_iterations=5, learning_rate=1e-3)
    return GDRTrainingConfig(**{**settings, **options})


@pytest.fixture(scope="module")
def trained(collection, tiny_bert, tmp_path_factory):
    run = tmp_path_factory.mktemp("gdr-run")
    return run, train_gdr(config(collection, tiny_bert, run))


def tiny_model(tiny_bert, cids, adaptive_head=True) -> GDRModel:
    from semiret.models.encoders import load_encoder

    torch.manual_seed(0)
    clusters = Clusters(cids, np.zeros((len(cids), 32), np.float32), [], np.zeros(0, np.int64))
    return GDRModel(load_encoder(str(tiny_bert), "dense"), clusters,
                    GDRConfig(branching=3, decoder_layers=1, heads=2, adaptive_head=adaptive_head))


# ---------------------------------------------------------------------------------------------- prefix tree, decoding
def test_the_prefix_tree_allows_only_the_children_of_a_prefix():
    tree = PrefixTree([(1, 0), (2, 1, 0), (2, 3, 0)], branching=3)
    assert tree.allowed(()) == [1, 2] and tree.allowed((2,)) == [1, 3] and tree.allowed((1,)) == [0]
    assert tree.allowed((3,)) == [] and tree.max_length == 3 and tree.leaf[(2, 3, 0)] == 2
    with pytest.raises(SemiretError, match="terminal"):
        PrefixTree([(1, 2)], branching=3)
    with pytest.raises(SemiretError, match="repeat"):
        PrefixTree([(1, 0), (1, 0)], branching=3)


def test_position_aware_tokens_are_step_times_values_plus_value_plus_two(tiny_bert):
    model = tiny_model(tiny_bert, [(1, 0), (2, 1, 0)])
    assert model.token_ids(torch.tensor([[2, 1, -1]])).tolist() == [[0, 4, 4 + 1 + 2, 0]]


@pytest.mark.parametrize("adaptive_head", [True, False])
def test_beam_search_returns_only_valid_ids_all_of_them_when_there_are_fewer_than_beams(tiny_bert, adaptive_head):
    cids = [(1, 0), (2, 1, 0), (2, 3, 0), (3, 0)]
    model = tiny_model(tiny_bert, cids, adaptive_head)
    leaves, scores, vectors = model.search_clusters(["cat dog", "statin"], beams=4, length_penalty=0.8)
    assert [sorted(row.tolist()) for row in leaves] == [[0, 1, 2, 3]] * 2  # 4 beams, but 2 children at the root
    assert all(np.all((s > 0) & (s <= 1)) for s in scores) and abs(scores[0].sum() - 1) < 1e-5  # a distribution
    assert vectors.shape == (2, 32)
    leaves, scores, _ = model.search_clusters(["cat dog"], beams=2, length_penalty=0.8)
    assert len(leaves[0]) == 2 and len(set(leaves[0].tolist())) == 2
    with pytest.raises(SemiretError, match="beams"):
        model.search_clusters(["cat"], beams=5, length_penalty=0.8)


def test_beam_search_finds_the_most_probable_ids(tiny_bert):
    """With a beam as wide as the tree, the ranking is exact: it matches teacher-forced path probabilities."""
    cids = [(1, 0), (2, 1, 0), (2, 3, 0), (3, 0)]
    model = tiny_model(tiny_bert, cids)
    leaves, scores, _ = model.search_clusters(["mice heart"], beams=4, length_penalty=0.8)
    states, mask, _ = model.encode(["mice heart"] * 4)
    targets = model.cid_targets(range(4))
    logits = model.step_logits(model.token_ids(targets[:, :-1]), states, mask)
    expected = []
    for leaf, cid in enumerate(cids):
        logp, prefix = 0.0, ()
        for step, value in enumerate(cid):
            allowed = model.tree.allowed(prefix)
            logp += torch.log_softmax(logits[leaf, step, allowed], -1)[allowed.index(value)].item()
            prefix += (value,)
        expected.append(np.exp(logp))
    assert np.allclose(scores[0], np.asarray(expected)[leaves[0]], atol=1e-5)


def test_beams_follow_only_the_leaves_holding_documents_each_with_its_probability_over_the_whole_tree(tiny_bert):
    """An index holding documents in some leaves only (a corpus smaller than the tree's, deletions, a filter): the
    beams follow those leaves' prefixes alone, so one beam finds a held leaf, and each leaf decoded keeps its path
    probability over the whole tree (its documents rank on the scale of a decoding of every leaf)."""
    cids = [(1, 0), (2, 1, 0), (2, 3, 0), (3, 0)]
    model = tiny_model(tiny_bert, cids)
    every, every_scores, _ = model.search_clusters(["mice heart"], beams=4, length_penalty=0.8)
    whole_tree = dict(zip(every[0].tolist(), every_scores[0].tolist()))
    for held_leaves in ([2], [0, 3], [1, 2]):
        held = np.isin(np.arange(len(cids)), held_leaves)
        leaves, _, _ = model.search_clusters(["mice heart"], beams=1, length_penalty=0.8, held=held)
        assert len(leaves[0]) == 1 and leaves[0][0] in held_leaves
        leaves, scores, _ = model.search_clusters(["mice heart"], beams=4, length_penalty=0.8, held=held)
        assert sorted(leaves[0].tolist()) == held_leaves
        assert np.allclose(scores[0], [whole_tree[leaf] for leaf in leaves[0].tolist()], atol=1e-6)


def test_an_index_of_part_of_the_trees_corpus_is_searched_in_one_decoding(tiny_gdr, tmp_path):
    """The documents of one of the model's three leaves indexed, one beam: both are found by the first decoding
    (it had found an empty leaf, and the query was decoded again, wider)."""
    from semiret.search import GDRRetriever

    retriever = GDRRetriever.build(TINY_DOCS[4:], tmp_path / "index", model=str(tiny_gdr), beams=1)
    assert retriever.index.held_leaves().tolist() == [False, False, True]
    model = retriever.query_side.model
    decoded = []
    search_clusters = model.search_clusters
    model.search_clusters = lambda texts, *args: decoded.append(len(texts)) or search_clusters(texts, *args)
    hits = retriever.search(["cat", "statin"], k=2)
    assert [sorted(ids) for ids in hits.ids] == [sorted(d.id for d in TINY_DOCS[4:])] * 2 and decoded == [2]


@pytest.mark.parametrize("adaptive_head", [True, False])
def test_decoding_over_one_querys_precomputed_memory_equals_the_decoder(tiny_bert, adaptive_head):
    """The beam search's path (cross-attention keys and values computed once per query, the last step's logits
    only) gives the teacher-forced decoder's logits, padded query tokens included."""
    model = tiny_model(tiny_bert, [(1, 0), (2, 1, 0), (2, 3, 0), (3, 0)], adaptive_head)
    states, mask, _ = model.encode(["statins", "a much longer query about mice and their hearts"])
    assert not mask[0].all()  # the first query is padded
    inputs = model.token_ids(torch.tensor([[2, 1], [1, 0], [3, 0]]))
    with torch.inference_mode():
        full = model.step_logits(inputs, states[:1].expand(3, -1, -1), mask[:1].expand(3, -1))
        last = model.step_logits(inputs, None, None, model.cross_memory(states[:1], mask[:1]))
    assert last.shape == (3, 1, 4) and torch.allclose(last, full[:, -1:], atol=1e-5)
    model.train()
    with pytest.raises(SemiretError, match="inference"):
        model.step_logits(inputs, None, None, model.cross_memory(states[:1], mask[:1]))


# ---------------------------------------------------------------------------------------------- loss
def test_the_intra_loss_weighs_same_cluster_negatives_by_gamma_and_hides_other_positives():
    vectors = np.eye(4, dtype=np.float32)
    leaves = np.asarray([0, 0, 1, 1])
    loss = GDRLoss(vectors, leaves, gamma=2.0, intra_negatives=1, temperature=1.0)
    queries = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    examples = (HierarchyExample("a", 0), HierarchyExample("b", 2, excluded=(3,)))
    value = loss.intra(queries, examples, np.random.default_rng(0))
    e = np.e
    first = -np.log(e / (e + 2 * 1 + 1 + 0))  # d1 (its cluster) x2, d2 in-batch x1, d3 absent (b's excluded)
    second = -np.log(e / (e + 1 + 1))  # d0, d1 in-batch; d3 hidden: b's other positive
    assert value.item() == pytest.approx((first + second) / 2, rel=1e-5)


# ---------------------------------------------------------------------------------------------- recipe
def test_training_reports_both_terms_and_writes_an_fp16_model_with_its_clusters(trained):
    from safetensors import safe_open

    run, summary = trained
    assert summary["documents"] == 40 and summary["pairs"] == 21 and summary["clusters"] >= 6
    assert all(set(terms) == {"inter", "intra"} for terms in summary["terms_per_epoch"])
    assert set(summary["prefix_overlap"]) == {"train", "test"}
    with safe_open(str(run / "model" / "gdr-decoder.safetensors"), "pt") as weights:
        assert all(weights.get_tensor(k).itemsize == 2 for k in weights.keys())
    model = GDRModel.load(str(run / "model"))
    assert len(model.tree.cids) == summary["clusters"] and model.clusters.document_ids[0] == "d0"
    training = json.loads((run / "model" / "gdr.json").read_text())["training"]
    assert training["config"] == summary["config"]  # what its card and `semiret models` say it was trained on


def test_an_epoch_holds_the_pairs_and_a_span_and_a_cloze_query_per_document(collection, tiny_bert):
    from semiret.data.collection import Collection
    from semiret.training.data import TrainingSet

    documents = list(Collection(collection).corpus())
    training_set = TrainingSet.from_collection(Collection(collection), "train")
    batches = GDRBatches(documents, training_set, 8, repeats=1, spans=1, clozes=1, span_words=5)
    examples = [e for b in batches.epoch(random.Random(0)) for e in b.items]
    assert len(examples) == 21 + 80
    pseudo = [e for e in examples if e.query not in {p.query for p in training_set.pairs}]
    assert np.bincount([e.document for e in pseudo]).tolist() == [2] * 40
    assert all(e.query in documents[e.document].text for e in pseudo)
    assert sum(len(e.query.split()) == 10 and e.query.endswith(".") for e in pseudo) >= 30  # a sentence each
    q0 = [e for e in examples if e.query == training_set.pairs[0].query and e.document in (0, 1)]
    assert sorted(e.excluded for e in q0) == [(0,), (1,)]


def test_training_resumes_where_it_stopped(collection, tiny_bert, tmp_path, monkeypatch):
    steps = recording_loss(monkeypatch, GDRLoss, crash_at=16)
    with pytest.raises(Crash):
        train_gdr(config(collection, tiny_bert, tmp_path / "run", epochs=2))
    assert len(steps) == 16  # 13 steps an epoch: the crash is in the second
    monkeypatch.undo()
    resumed = recording_loss(monkeypatch, GDRLoss)
    train_gdr(config(collection, tiny_bert, tmp_path / "run", epochs=2))
    assert len(resumed) == 13  # epoch 2 again, from the checkpoint of epoch 1
    reference = tmp_path / "again"
    train_gdr(config(collection, tiny_bert, reference, epochs=2))
    assert np.allclose(checkpointed_weights(tmp_path / "run"), checkpointed_weights(reference), atol=1e-5)


def test_clusters_are_made_again_for_a_run_restarted_with_other_options(collection, tiny_bert, tmp_path,
                                                                         monkeypatch, caplog):
    """A run stopped in its first epoch reused its clusters whatever leaf size or branching it restarted with;
    a run with a checkpoint, trained on them, is told to keep its options or start again."""
    import json

    run = tmp_path / "run"
    recording_loss(monkeypatch, GDRLoss, crash_at=3)
    with pytest.raises(Crash):
        train_gdr(config(collection, tiny_bert, run, epochs=1, leaf_size=6))
    monkeypatch.undo()
    with caplog.at_level("WARNING"):
        train_gdr(config(collection, tiny_bert, run, epochs=1, leaf_size=10))
    assert "leaf_size: 6 -> 10): it is made again" in caplog.text
    assert json.loads((run / "clusters.json").read_text())["made_with"]["leaf_size"] == 10
    with pytest.raises(SemiretError, match=r"other options than this run's \(branching: 3 -> 4\).*--no-resume"):
        train_gdr(config(collection, tiny_bert, run, epochs=1, leaf_size=10, branching=4))


def test_only_the_top_query_layers_train_when_asked(collection, tiny_bert, tmp_path, monkeypatch):
    """... and a model started from a packaged encoder saves E_Q as the layers that changed."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    import semiret.methods.gdr as gdr_recipe
    from semiret.models.base import DELTA_FILE
    from semiret.models.encoders import load_encoder

    monkeypatch.setattr(gdr_recipe, "REGISTRY", {str(tiny_bert): None})  # as if the tiny model were packaged
    train_gdr(config(collection, tiny_bert, tmp_path / "run", epochs=1, trained_query_layers=1))
    trained = load_file(str(tmp_path / "run" / "checkpoint" / "model.safetensors"))
    initial = {f"encoder.{k}": v for k, v in load_encoder(str(tiny_bert), "dense").state_dict().items()}
    unchanged = {k for k, v in initial.items() if k in trained and torch.equal(trained[k], v)}
    assert "encoder.backbone.encoder.layer.0.output.dense.weight" in unchanged
    assert "encoder.backbone.embeddings.word_embeddings.weight" in unchanged
    assert "encoder.backbone.encoder.layer.1.output.dense.weight" not in unchanged
    model = tmp_path / "run" / "model"
    with safe_open(str(model / "query-encoder" / DELTA_FILE), "pt") as delta:
        assert {k.split(".")[2] for k in delta.keys() if k.startswith("encoder.layer.")} == {"1"}
        assert not any(k.startswith("embeddings.") for k in delta.keys())
    saved = GDRModel.load(str(model))
    assert saved.config.query_base == str(tiny_bert)
    full = load_file(str(tmp_path / "run" / "checkpoint" / "model.safetensors"))
    for name, value in saved.encoder.backbone.state_dict().items():
        if not name.startswith("pooler."):  # the tiny model's pooler is drawn anew at each load (not used)
            assert torch.allclose(value, full[f"encoder.backbone.{name}"].float(), atol=2e-3), name


def test_the_per_document_baseline_gives_every_document_its_own_id(collection, tiny_bert, tmp_path):
    summary = train_gdr(config(collection, tiny_bert, tmp_path / "run", identifiers="document", epochs=1,
                                leaf_size=4))
    assert summary["clusters"] == 40 and summary["cluster_size"] == {"mean": 1.0, "max": 1}
    with pytest.raises(SemiretError, match="positions"):
        train_gdr(config(collection, tiny_bert, tmp_path / "big", identifiers="document", leaf_size=30))


def test_held_out_documents_are_neither_clustered_nor_trained_on(collection, tiny_bert, tmp_path):
    import json

    summary = train_gdr(config(collection, tiny_bert, tmp_path / "run", held_out_fraction=0.25, epochs=1))
    held_out = json.loads((tmp_path / "run" / "held-out.json").read_text())
    assert summary["documents"] == 30 and len(held_out) == 10 and summary["held_out_documents"] == 10
    model = GDRModel.load(str(tmp_path / "run" / "model"))
    assert not set(held_out) & set(model.clusters.document_ids)


@pytest.mark.parametrize("options, message", [
    ({"identifiers": "words"}, "identifiers"), ({"held_out_fraction": 1.0}, "held-out"),
    ({"branching": 1}, "branching"), ({"data": "/nonexistent"}, "nonexistent"),
    ({"heads": 5}, r"--heads 5 does not divide E_Q's width 32"),  # was an AssertionError after E_D's encoding
    ({"trained_query_layers": 9}, r"--trained-query-layers 9: E_Q has 2 transformer layers"),  # trained all, silently
])
def test_bad_training_options_fail_before_any_compute(collection, tiny_bert, tmp_path, options, message):
    with pytest.raises(SemiretError, match=message):
        train_gdr(config(collection, tiny_bert, tmp_path / "run", **options))
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------------------------- retriever
@pytest.fixture(scope="module")
def gdr_index(trained, collection, tmp_path_factory):
    from semiret.data.collection import Collection
    from semiret.search import GDRRetriever

    path = tmp_path_factory.mktemp("gdr-index") / "index"
    GDRRetriever.build(list(Collection(collection).corpus()), path, model=str(trained[0] / "model"), beams=2)
    return path


def test_search_scores_only_the_decoded_clusters_by_s_inter_plus_beta_sigmoid(trained, gdr_index):
    from semiret.search import GDRRetriever

    retriever = GDRRetriever.open(gdr_index, beams=2, beta=1.0)
    model = retriever.query_side.model
    assert retriever.index.describe()["documents"] == 40
    leaves, inter, vectors = model.search_clusters(["statin cancer risk"], beams=2, length_penalty=0.8)
    members = {d for leaf in leaves[0] for d, l in zip(model.clusters.document_ids, model.clusters.document_leaves)
               if l == leaf}
    hits = retriever.search("statin cancer risk", k=len(members))  # more: decoded wider (the next test)
    assert {h.id for h in hits} == members  # the trained documents keep their leaves
    s_inter = dict(zip(leaves[0].tolist(), inter[0].tolist()))
    row = model.clusters.document_ids.index(hits[0].id)
    expected = s_inter[model.clusters.document_leaves[row]] + 1 / (1 + np.exp(-retriever.index.get_vector(hits[0].id)
                                                                               @ vectors[0]))
    assert hits[0].score == pytest.approx(expected, rel=1e-5)
    assert retriever.query_side.cost_figures()["documents_scored_per_query"] == len(members)


def test_a_query_whose_decoded_clusters_hold_fewer_than_k_live_documents_is_decoded_wider(trained, collection,
                                                                                          tmp_path):
    """One beam decodes one leaf (at most 6 documents): k = 10 found 6 or fewer, and a filter passing 10 documents
    found those of them in that leaf. A query left with fewer than k live hits is decoded again with 4x the beams,
    up to every leaf: k hits whenever k live documents pass, each scored as with every leaf decoded, and the
    documents scored counting the wider rounds (each document once)."""
    from semiret.data.collection import Collection
    from semiret.search import GDRRetriever

    documents = [Document(d.id, d.text, d.title, metadata={"quarter": int(d.id[1:]) % 4 == 0, "one": d.id == "d7"})
                 for d in Collection(collection).corpus()]
    path = tmp_path / "index"
    GDRRetriever.build(documents, path, model=str(trained[0] / "model"), beams=1)
    narrow = GDRRetriever.open(path, beams=1)
    leaf_count = narrow.index.leaf_count
    every = GDRRetriever.open(path, beams=leaf_count)
    queries = ["statin cancer risk", "morning garden birds"]
    leaves, _, _ = narrow.query_side.model.search_clusters(queries, 1, 0.8)
    first = [sum(int(leaf) == int(leaves[row][0]) for leaf in narrow.index.segments[0].leaves) for row in range(2)]
    assert leaf_count > 4 and max(first) < 10  # one leaf holds fewer than k documents

    widest = every.search(queries, k=40)
    all_scores = [dict(zip(ids, scores)) for ids, scores in zip(widest.ids, widest.scores)]
    hits = narrow.search(queries, k=10)
    assert [len(ids) for ids in hits.ids] == [10, 10]
    for row, (ids, scores) in enumerate(zip(hits.ids, hits.scores)):  # S_inter of every leaf as the widest decoding's
        assert all(s == pytest.approx(all_scores[row][d], rel=1e-5) for d, s in zip(ids, scores))
    figures = narrow.query_side.cost_figures()
    assert 10 <= figures["documents_scored_per_query"] <= 40 and figures["documents_scored_fraction"] <= 1

    for spec, expected in (({"quarter": True}, 10), ({"one": True}, 1)):  # 10 pass; 1 passes (every leaf decoded)
        filtered = narrow.search(queries, k=10, filter=spec)
        assert [len(ids) for ids in filtered.ids] == [expected, expected]
        assert filtered.ids == every.search(queries, k=10, filter=spec).ids

    narrow.delete([f"d{i}" for i in range(40) if i % 4])  # deletions as a filter: 10 live documents left
    left = narrow.search(queries, k=10)
    assert [sorted(ids) for ids in left.ids] == [sorted(f"d{i}" for i in range(0, 40, 4))] * 2
    every.index.refresh()
    assert left.ids == every.search(queries, k=10).ids


def test_beta_defaults_to_the_models_recorded_choice_else_the_papers(trained, gdr_index, collection, tmp_path):
    import json
    import shutil

    from semiret.data.collection import Collection
    from semiret.search import GDRRetriever

    assert GDRRetriever.open(gdr_index, beams=2).query_side.options.beta == 1.0  # nothing recorded: the paper's
    model = tmp_path / "model"
    shutil.copytree(trained[0] / "model", model)
    meta = json.loads((model / "gdr.json").read_text())
    (model / "gdr.json").write_text(json.dumps({**meta, "search": {"beta": 10.0}}))
    index = tmp_path / "index"
    GDRRetriever.build(list(Collection(collection).corpus()), index, model=str(model), beams=2)
    assert GDRRetriever.open(index, beams=2).query_side.options.beta == 10.0
    assert GDRRetriever.open(index, beams=2, beta=0.5).query_side.options.beta == 0.5


def test_documents_are_added_to_the_nearest_leaf_and_deleted_without_retraining(trained, gdr_index, tmp_path):
    import shutil

    from semiret.search import GDRRetriever

    path = tmp_path / "index"
    shutil.copytree(gdr_index, path)
    retriever = GDRRetriever.open(path, beams=GDRRetriever.open(gdr_index, beams=1).index.leaf_count)
    model = retriever.query_side.model
    new = Document("new-1", "statin cancer risk heart therapy tumour mice growth risk statin.")
    vector = retriever.document_side.encoder.encode_document([new.text], show_progress=False)
    distances = ((model.clusters.leaf_means - vector) ** 2).sum(1)
    retriever.add([new])
    assert int(retriever.index.segments[-1].leaves[0]) == int(distances.argmin())
    assert "new-1" in {h.id for h in retriever.search("statin cancer risk", k=41)}  # every cluster decoded
    fingerprint = retriever.index.fingerprint
    retriever.delete(["new-1", "d3"])
    assert not {"new-1", "d3"} & {h.id for h in retriever.search("statin cancer risk", k=41)}
    assert retriever.index.fingerprint == fingerprint and len(model.tree.cids) == len(model.clusters.cids)


def test_an_index_refuses_its_document_encoder_retrained_in_place(trained, collection, tiny_bert, tmp_path):
    """New documents are placed by E_D's vectors: E_D retrained in place since the build placed them by others,
    silently (a dense index refuses its model so changed)."""
    import json
    import shutil

    import torch
    from transformers import BertForMaskedLM

    from semiret.data.collection import Collection
    from semiret.search import GDRRetriever

    model, encoder = tmp_path / "model", tmp_path / "encoder"
    shutil.copytree(trained[0] / "model", model)
    shutil.copytree(tiny_bert, encoder)
    marker = json.loads((model / "gdr.json").read_text())
    marker["config"]["document_encoder"] = str(encoder)
    (model / "gdr.json").write_text(json.dumps(marker))
    GDRRetriever.build(list(Collection(collection).corpus())[:12], tmp_path / "index", model=str(model), beams=2)
    GDRRetriever.open(tmp_path / "index").add([Document("n1", "statins and cancer")])  # the same weights: added
    retrained = BertForMaskedLM.from_pretrained(encoder)
    with torch.no_grad():
        for parameter in retrained.parameters():
            parameter.add_(0.01)
    retrained.save_pretrained(encoder)
    with pytest.raises(SemiretError, match="other weights than its document encoder"):
        GDRRetriever.open(tmp_path / "index").add([Document("n2", "statins and cancer")])


def test_a_document_keeps_its_trained_leaf_only_with_its_trained_text(trained, gdr_index, collection, tmp_path):
    """Trained leaves were looked up by id: a document replaced with another text (or another corpus's document of
    a trained id) stayed in the old text's cluster, where searches for the new text did not decode it."""
    import shutil

    from semiret.data.collection import Collection
    from semiret.search import GDRRetriever

    path = tmp_path / "index"
    shutil.copytree(gdr_index, path)
    retriever = GDRRetriever.open(path, beams=1)
    clusters = retriever.query_side.model.clusters
    assert clusters.document_keys is not None and len(clusters.document_keys) == len(clusters.document_ids)
    trained = clusters.trained_leaves()
    corpus = list(Collection(collection).corpus())
    leaf_of = {d.id: trained[key] for d, key in zip(corpus, clusters.document_keys)}
    vectors = retriever.document_side.encoder.encode_document([d.text for d in corpus], show_progress=False)
    nearest = {d.id: int(((clusters.leaf_means - v) ** 2).sum(1).argmin()) for d, v in zip(corpus, vectors)}
    target = corpus[0]
    donor = next(d for d in corpus if nearest[d.id] != leaf_of[target.id] and d.title == target.title == "")
    retriever.add([Document(target.id, donor.text)], replace=True)
    assert int(retriever.index.segments[-1].leaves[0]) == nearest[donor.id] != leaf_of[target.id]
    retriever.add([target], replace=True)  # its trained text again: its trained leaf again
    assert int(retriever.index.segments[-1].leaves[0]) == leaf_of[target.id]


def test_an_embedding_cache_spares_a_second_embedding_of_the_corpus(trained, gdr_index, collection, tmp_path,
                                                                    monkeypatch):
    """Indexes built with one ``embedding_cache`` embed each document once; their vectors are E_D's."""
    from semiret.data.collection import Collection
    from semiret.models.base import TextEncoder
    from semiret.search import GDRRetriever

    embedded = []
    encode = TextEncoder.encode_document
    monkeypatch.setattr(TextEncoder, "encode_document",
                        lambda self, texts, *a, **k: embedded.extend(texts) or encode(self, texts, *a, **k))
    documents, model, cache = list(Collection(collection).corpus()), str(trained[0] / "model"), tmp_path / "cache"
    first = GDRRetriever.build(documents, tmp_path / "a", model=model, beams=2, embedding_cache=str(cache))
    assert len(embedded) == 40
    second = GDRRetriever.build(documents, tmp_path / "b", model=model, beams=2, embedding_cache=str(cache))
    second.add([Document("new-1", "statin therapy and tumour growth")])
    assert len(embedded) == 41  # only the new document
    reference = GDRRetriever.open(gdr_index, beams=2)
    for doc_id in ("d0", "d17", "d39"):
        assert np.allclose(second.index.get_vector(doc_id), reference.index.get_vector(doc_id), atol=1e-6)
        assert np.array_equal(first.index.get_vector(doc_id), second.index.get_vector(doc_id))
    assert second.search(["statin cancer risk"], k=5).ids == reference.search(["statin cancer risk"], k=5).ids
    other = [Document("d0", "penguins huddle through the polar winter")]  # another corpus's d0: embedded anew
    third = GDRRetriever.build(other, tmp_path / "c", model=model, beams=2, embedding_cache=str(cache))
    uncached = GDRRetriever.build(other, tmp_path / "d", model=model, beams=2)
    assert len(embedded) == 43 and np.allclose(third.index.get_vector("d0"), uncached.index.get_vector("d0"), atol=1e-6)


def test_bad_input_is_refused_before_any_compute(trained, gdr_index, collection, tmp_path, tiny_nail, tiny_bert):
    from semiret.models.gdr import CLUSTERS_FILE
    from semiret.search import DenseRetriever, GDRRetriever
    import shutil

    leaves = GDRRetriever.open(gdr_index, beams=1).index.leaf_count
    with pytest.raises(SemiretError, match="beams"):
        GDRRetriever.open(gdr_index, beams=leaves + 1)
    searcher = GDRRetriever.open(gdr_index, beams=2)  # an empty query finds nothing; the others are searched
    assert searcher.search(["statin", "  "]).ids == [searcher.search(["statin"]).ids[0], []]
    assert searcher.search(["", " "]).ids == [[], []]
    with pytest.raises(SemiretError, match="is a saved NAIL model, which retriever 'gdr' does not take; search it "
                                           "with -r nail-sparse"):
        GDRRetriever.build([Document("x", "text")], tmp_path / "nail", model=str(tiny_nail))
    assert not (tmp_path / "nail").exists()
    other = tmp_path / "other-model"  # the same model, with two leaves' ids swapped: another prefix tree
    shutil.copytree(trained[0] / "model", other)
    clusters = Clusters.load(other / CLUSTERS_FILE)
    clusters.cids[0], clusters.cids[1] = clusters.cids[1], clusters.cids[0]
    clusters.save(other / CLUSTERS_FILE)
    index = tmp_path / "index"
    shutil.copytree(gdr_index, index)
    meta = json.loads((index / "meta.json").read_text())
    meta["analyzer"]["model"] = str(other)
    (index / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SemiretError, match="does not match"):
        GDRRetriever.open(index, beams=2)
    dense = DenseRetriever.build([Document("x", "text")], tmp_path / "dense", model=str(tiny_bert))
    with pytest.raises(SemiretError, match="gdr"):
        GDRRetriever.open(dense.index.path, beams=2)
    with pytest.raises(SemiretError, match="leaf"):
        GDRRetriever.open(gdr_index, beams=2).index.add(dense.document_side.encode([Document("y", "text")]))


def test_eval_reports_the_documents_each_query_scored(trained, gdr_index, collection):
    from semiret.data.collection import Collection
    from semiret.evaluation.evaluate import evaluate
    from semiret.search import GDRRetriever

    figures = evaluate(collection, "gdr", index=gdr_index, beams=3)
    assert 0 < figures["documents_scored_per_query"] <= 40 and figures["documents_scored_fraction"] <= 1
    # k = 100 exceeds the corpus: the queries are decoded wider until every leaf is (k hits are sought while live
    # documents are left), so each query's hits are the documents it scored, each scored once: all 40
    queries, qrels = Collection(collection).queries("test"), Collection(collection).qrels("test")
    hits = GDRRetriever.open(gdr_index, beams=3).search(list(queries.values()), k=100).ids
    assert figures["documents_scored_per_query"] == pytest.approx(np.mean([len(h) for h in hits]), abs=0.05)
    assert figures["documents_scored_fraction"] == pytest.approx(figures["documents_scored_per_query"] / 40, abs=1e-3)
    assert all(len(h) == 40 for h in hits) and figures["documents_scored_per_query"] == 40
    found = [bool(set(qrels[q]) & set(h)) for q, h in zip(queries, hits)]
    assert figures["R@100"] == pytest.approx(np.mean(found)) == 1.0


def test_the_demo_has_a_gdr_row_when_given_a_model(trained, collection, tmp_path, monkeypatch):
    from semiret import demo

    monkeypatch.setattr(demo, "demo_systems", lambda *flags: [("BM25", "bm25", {})])
    monkeypatch.setattr(demo, "plot_quality_latency", lambda rows, path, title: path)
    monkeypatch.setattr(demo, "GDR_BEAMS", 2)
    rows = demo.run_demo(str(collection), tmp_path / "out", gdr=str(trained[0] / "model"))
    assert [(r["system"], r["retriever"]) for r in rows] == [("BM25", "bm25"), ("GDR, 2 beams", "gdr")]


def test_the_share_of_documents_scored_counts_what_each_search_could_score(tmp_path):
    """Each query's documents scored over the live documents it searched among (a filter's view: those it lets
    through), summed: never above 1, whatever searches came before (a decoder stands in for the model)."""
    from semiret.indexes.clustered import ClusteredDenseIndex, ClusteredEmbeddings
    from semiret.indexes.filters import MetadataFilter
    from semiret.search.gdr import GDRQueries, GDRQueryOptions

    rng = np.random.default_rng(1)
    leaves, n, dim = 8, 400, 4
    documents = [Document(f"d{i}", "x", metadata={"rare": i < 3}) for i in range(n)]
    index = ClusteredDenseIndex.build(tmp_path / "gdr", "gdr", [ClusteredEmbeddings(
        [d.id for d in documents], rng.normal(size=(n, dim)).astype(np.float32), documents,
        rng.integers(0, leaves, n))], dim=dim, analyzer={"type": "test"}, leaf_count=leaves, fingerprint="f")

    class Decoder:
        def search_clusters(self, texts, beams, length_penalty, held):
            order = np.arange(leaves)[:beams]
            return ([order for _ in texts], [(1.0 / (order + 1)).astype(np.float32) for _ in texts],
                    rng.normal(size=(len(texts), dim)).astype(np.float32))

    queries = GDRQueries("model", GDRQueryOptions(beams=1, beta=1.0))
    queries.__dict__["model"] = Decoder()
    for _ in range(10):
        queries.search(index, ["a"], 10, 1)
    unfiltered = queries.cost_figures()["documents_scored_fraction"]
    assert 0 < unfiltered < 1
    hits = queries.search(index.restricted(MetadataFilter({"rare": True})), ["a"], 10, 1)
    assert len(hits.ids[0]) == 3 and queries.cost_figures()["documents_scored_fraction"] <= 1


def test_a_clustered_index_refuses_leaves_given_twice_unknown_or_without_their_scores(tmp_path):
    """``search_clusters`` took any leaves: one given twice scored its documents twice (the same document twice in
    the hits), fewer ``S_inter`` scores than leaves were spread over them, a leaf past the index's a bare
    IndexError. Each is a clear error (GDR's decoder gives none of these; a caller of the index might)."""
    from semiret.indexes.clustered import ClusteredDenseIndex, ClusteredEmbeddings

    rng = np.random.default_rng(0)
    index = ClusteredDenseIndex.build(tmp_path / "c", "gdr", [ClusteredEmbeddings(
        [f"a{i}" for i in range(6)], rng.normal(size=(6, 8)).astype(np.float32), None, np.array([0, 0, 1, 1, 2, 2]))],
        dim=8, analyzer={"type": "test"}, leaf_count=3, fingerprint="f")
    queries = rng.normal(size=(1, 8)).astype(np.float32)
    half = np.float32(0.5)
    hits, _ = index.search_clusters(queries, [np.array([0, 2])], [np.array([half, half])], k=4)
    assert sorted(hits.ids[0]) == ["a0", "a1", "a4", "a5"]
    for leaves, inter in (([0, 0], [half, half]), ([0, 1], [half]), ([7], [half]), ([-1], [half])):
        with pytest.raises(SemiretError, match="query 0: its leaves must be distinct numbers below 3"):
            index.search_clusters(queries, [np.array(leaves)], [np.array(inter, np.float32)], k=4)


def test_a_query_encoder_with_truncated_embeddings_is_refused(tiny_bert):
    """GDR's decoder cross-attends over E_Q's whole token states: an encoder keeping only the first dimensions of its
    embeddings (truncate_dim) would give it the wrong width."""
    from semiret.models.encoders import load_encoder

    clusters = Clusters([(1, 0), (2, 0)], np.zeros((2, 16), np.float32), [], np.zeros(0, np.int64))
    with pytest.raises(SemiretError, match="truncate_dim"):
        GDRModel(load_encoder(str(tiny_bert), "dense", truncate_dim=16), clusters,
                 GDRConfig(branching=3, decoder_layers=1, heads=2))
