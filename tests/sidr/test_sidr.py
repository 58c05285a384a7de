"""SiDR: losses, the fast max-pooled projection, embedding cache, miner, trainer and the three pipelines,
with a tiny randomly initialised masked LM (bert-base-uncased vocabulary, hidden 32)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import yaml

from semiret.data import Collection, Document
from semiret.errors import SemiretError
from semiret.indexes.embedding_cache import EmbeddingCache
from semiret.models.pooled_projection import max_pooled_projection, top_k_max_pooled_projection
from semiret.models.pooling import elu1p, masked_max, top_k_sparsify
from semiret.search import BagOfTokensRetriever, open_retriever
from semiret.search.semiparametric import LateParametricRetriever, SiDRBetaRetriever, SiDRFullRetriever, cache_to_full_index
from semiret.methods.sidr import SiDRTrainingConfig, starting_sidr_model, train_sidr
from semiret.models.sidr import SiDRModel, sparse_queries
from semiret.training.data import TrainingSet
from semiret.training.losses import sidr_loss, symmetric_info_nce
from semiret.training.miners import RetrievedNegativeMiner, has_answer
from helpers import write_beir


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory):
    """A 2-layer, 32-wide BertForMaskedLM with the real WordPiece tokenizer, saved like a hub model."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from semiret.data.packaged import resolve_model_path

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-mlm")
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertForMaskedLM(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(resolve_model_path("splade-tiny")).save_pretrained(path)
    return str(path)


# ------------------------------------------------------------------ losses and projections
def test_symmetric_info_nce_prefers_aligned_pairs():
    q = torch.eye(4)
    assert symmetric_info_nce(q * 10, torch.eye(4) * 10) < symmetric_info_nce(q * 10, torch.eye(4).flip(0) * 10)


def test_symmetric_info_nce_handles_extra_negatives():
    torch.manual_seed(0)
    q, p = torch.randn(3, 8), torch.randn(5, 8)  # 3 positives + 2 negatives
    scores = q @ p.T
    # query i against all 5 passages, passage i (a positive) against the 3 queries; each direction's mean
    to_passages = sum(torch.logsumexp(scores[i], 0) - scores[i, i] for i in range(3)) / 3
    to_queries = sum(torch.logsumexp(scores[:, i], 0) - scores[i, i] for i in range(3)) / 3
    assert symmetric_info_nce(q, p).item() == pytest.approx((to_passages + to_queries).item(), rel=1e-5)
    assert symmetric_info_nce(q, p).item() != pytest.approx(symmetric_info_nce(q, p[:3]).item(), rel=1e-3)


def test_sidr_loss_forms_and_ablation():
    torch.manual_seed(1)
    q, p = torch.rand(4, 20), torch.rand(4, 20)
    q_bot, p_bot = (torch.rand(4, 20) > 0.5).float(), (torch.rand(4, 20) > 0.5).float()
    full = sidr_loss(q, p, q_bot, p_bot)
    para_only = sidr_loss(q, p, q_bot, p_bot, semi_parametric=False)
    assert torch.allclose(para_only.total, symmetric_info_nce(q, p))
    assert full.total > para_only.total
    assert set(para_only.terms) == {"parametric"} and full.terms["parametric"] == para_only.terms["parametric"]
    assert full.total.item() == pytest.approx(full.terms["parametric"] + full.terms["semi_parametric"], rel=1e-6)
    code = sidr_loss(q, p, q_bot, p_bot, top_k_sparsify(q, 5), top_k_sparsify(p, 5), form="code")
    assert torch.isfinite(code.total)
    assert code.total.item() == pytest.approx(code.terms["parametric"] + code.terms["semi_parametric"], rel=1e-6)
    with pytest.raises(ValueError, match="form='code' needs the sparsified q_sparse and p_sparse"):
        sidr_loss(q, p, q_bot, p_bot, form="code")


@pytest.mark.parametrize("top_k", [None, 7])
def test_fast_projection_equals_naive_values_and_gradients(top_k):
    torch.manual_seed(0)
    states = torch.randn(3, 9, 6, requires_grad=True)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 4:] = 0
    weight = torch.randn(40, 6, requires_grad=True)
    bias = torch.randn(40, requires_grad=True)
    naive = elu1p(masked_max(torch.nn.functional.linear(states, weight, bias), mask))
    if top_k:
        naive = top_k_sparsify(naive, top_k)
    naive.pow(2).sum().backward()
    expected = [t.grad.clone() for t in (states, weight, bias)]
    for t in (states, weight, bias):
        t.grad = None
    if top_k:
        fast = top_k_max_pooled_projection(states, mask, weight, bias, top_k, elu1p)
    else:
        fast = elu1p(max_pooled_projection(states, mask, weight, bias))
    fast.pow(2).sum().backward()
    assert torch.allclose(fast, naive, atol=1e-2 if top_k else 1e-6)
    if not top_k:  # (top-k may select in bfloat16: boundary entries can differ; values are exact float32)
        for got, want in zip((states.grad, weight.grad, bias.grad), expected):
            assert torch.allclose(got, want, atol=1e-5)


# ------------------------------------------------------------------ embedding cache
def test_embedding_cache_persists_and_rejects_another_encoder(tmp_path):
    cache = EmbeddingCache(tmp_path / "c", "sparse", "vdr:m1")
    cache.put(["a", "b"], [(np.array([3, 9], np.int32), np.array([0.5, 1.0], np.float32)),
                           (np.array([4], np.int32), np.array([2.0], np.float32))])
    cache.flush()
    assert cache.missing(["a", "c", "c"]) == ["c"]
    reopened = EmbeddingCache(tmp_path / "c", "sparse", "vdr:m1")
    terms, weights = reopened.get("a")
    assert terms.tolist() == [3, 9] and weights.tolist() == [0.5, 1.0]
    postings = reopened.to_postings(["b", "a"])
    assert postings.ids == ["b", "a"] and postings.terms.tolist() == [4, 3, 9]
    with pytest.raises(SemiretError, match="another cache|not sparse|caches"):
        EmbeddingCache(tmp_path / "c", "sparse", "vdr:other")
    with pytest.raises(SemiretError, match="not embedded"):
        reopened.to_postings(["zzz"])


# ------------------------------------------------------------------ miner and training data
def test_has_answer_matches_whole_tokens():
    assert has_answer("The capital is Paris, France.", ["paris"])
    assert not has_answer("Parisian cafes", ["Paris"])


def test_miner_skips_positives_and_answers(tmp_path, tiny_docs):
    retriever = BagOfTokensRetriever.build(tiny_docs, tmp_path / "bot")
    documents = {d.id: d for d in tiny_docs}
    miner = RetrievedNegativeMiner(retriever.index, documents, {"q": {"d1", "d2"}}, pool_size=2, depth=6)
    query = retriever.encode_query("cats dogs chase garden mailman")
    rng = random.Random(0)
    for _ in range(5):
        [[negative]] = miner.mine(["q"], [query], rng)
        assert negative.id not in {"d1", "d2"}
    [[negative]] = miner.mine(["q"], [query], rng, answers=[["garden"]])
    assert "garden" not in negative.full_text.lower()


def test_training_set_rejects_unknown_ids_and_empty_splits(tmp_path, tiny_docs):
    root = write_beir(tmp_path / "c", qrels={"q1": {"nope": 1}}, split="train")
    with pytest.raises(SemiretError, match="not in the corpus"):
        TrainingSet.from_collection(Collection(root), "train")
    root = write_beir(tmp_path / "e", qrels={"q1": {"d1": 0}}, split="train")
    with pytest.raises(SemiretError, match="no relevant"):
        TrainingSet.from_collection(Collection(root), "train")


def test_batches_never_repeat_a_query(tmp_path):
    root = write_beir(tmp_path / "c", qrels={"q1": {"d1": 1, "d2": 1, "d3": 1}, "q2": {"d4": 1}}, split="train")
    training = TrainingSet.from_collection(Collection(root), "train")
    batches = training.batches(4, random.Random(0))
    assert sum(map(len, batches)) == 4
    assert all(len({p.query_id for p in b}) == len(b) for b in batches)


# ------------------------------------------------------------------ training and pipelines
@pytest.fixture(scope="module")
def trained(tiny_mlm, tmp_path_factory):
    """A tiny SiDR run, trained as users train: by ``semiret train sidr``."""
    from typer.testing import CliRunner

    from helpers import TINY_DOCS, TINY_QRELS, TINY_QUERIES
    from semiret.methods.cli import train_app

    root = write_beir(tmp_path_factory.mktemp("data") / "tiny", TINY_DOCS, TINY_QUERIES, TINY_QRELS, split="train")
    output = tmp_path_factory.mktemp("run")
    result = CliRunner().invoke(train_app, ["sidr", "--data", str(root), "--output", str(output), "--base", tiny_mlm,
                                            "--epochs", "2", "--batch-size", "3", "--learning-rate", "1e-3",
                                            "--top-k", "30000", "--pool-size", "2", "--retrieve-depth", "4",
                                            "--query-max-length", "16", "--document-max-length", "32"])
    assert result.exit_code == 0, result.output
    return root, output, json.loads((output / "summary.json").read_text())


def test_training_runs_saves_fp16_and_resumes(trained, tiny_mlm):
    root, output, summary = trained
    assert len(summary["loss_per_epoch"]) == 2 and all(np.isfinite(summary["loss_per_epoch"]))
    meta = json.loads((output / "model" / "sidr.json").read_text())
    assert meta["shared"] is False and meta["training"]["pairs"] == 5
    assert summary["model"] == str(output / "model")  # where the model is, in what the recipe returns and writes
    assert meta["training"]["config"] == summary["config"] and summary["config"]["base"] == tiny_mlm
    # the command wrote the model's card from its records (before the resume below saves the model again)
    card = (output / "model" / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["library_name"] == "semiret" and front["tags"][:2] == ["semiret", "sidr"]
    assert front["datasets"] == [root.name] and "base_model" not in front  # a folder here, no hub id
    assert f"- Base: `{tiny_mlm}`" in card and "- Data: `tiny`, split `train` (5 training pairs)" in card
    assert f"semiret index --data corpus.jsonl -r sidr-beta --model {output / 'model'} --out" in card
    assert "| `epochs` | 2 |" in card and "Training time: " in card and "semiret eval --data COLLECTION" in card
    from safetensors import safe_open

    with safe_open(str(output / "model" / "query" / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
    model = SiDRModel.load(str(output / "model"))
    assert next(model.query_encoder.parameters()).dtype == torch.float32
    # a finished run resumes to the end without training again
    config = SiDRTrainingConfig(**{**summary["config"], "epochs": 2})
    again = train_sidr(config)
    assert again["loss_per_epoch"] == summary["loss_per_epoch"]


def test_average_with_base_mixes_the_trained_and_the_starting_weights(trained, tmp_path):
    """--average-with-base S: both encoders saved as (1 - S) x trained + S x the untrained model (WiSE-FT)."""
    import shutil

    root, output, summary = trained
    shutil.copytree(output, tmp_path / "run")
    config = SiDRTrainingConfig(**{**summary["config"], "output": str(tmp_path / "run"), "average_with_base": 0.5})
    assert train_sidr(config)["averaged_with_base"] == 0.5  # the finished run resumes, then averages
    start = starting_sidr_model(config.base, False, config.head, config.top_k, config.query_max_length,
                                config.document_max_length).state_dict()
    trained_weights = SiDRModel.load(str(output / "model")).state_dict()
    averaged = SiDRModel.load(str(tmp_path / "run" / "model")).state_dict()
    moved = [name for name, value in start.items() if not torch.equal(value, trained_weights[name])]
    assert moved
    for name in moved:
        torch.testing.assert_close(averaged[name], (trained_weights[name] + start[name]) / 2, atol=2e-3, rtol=2e-3)
    with pytest.raises(SemiretError, match="average_with_base"):
        SiDRTrainingConfig(data=".", output=str(tmp_path), average_with_base=1.5).validate()


def test_training_rejects_bad_config(tmp_path):
    with pytest.raises(SemiretError, match="negatives must be 'retrieved' or 'none', not 'bm25'"):
        SiDRTrainingConfig(data=".", output=str(tmp_path), negatives="bm25").validate()
    for option in ("pool_size", "retrieve_depth"):  # 0 left training with no mined negatives, silently
        with pytest.raises(SemiretError, match=r"retrieve-depth\)? (must be |of )at least 1"):
            SiDRTrainingConfig(data=".", output=str(tmp_path), **{option: 0}).validate()
    SiDRTrainingConfig(data=".", output=str(tmp_path), negatives="none", pool_size=0).validate()
    with pytest.raises(SemiretError, match=r"--document-max-length\) must be at least 2"):
        SiDRTrainingConfig(data=".", output=str(tmp_path), document_max_length=0).validate()
    with pytest.raises(SemiretError, match="--top-k must be at least 1"):
        SiDRTrainingConfig(data=".", output=str(tmp_path), top_k=0).validate()


def test_three_pipelines_and_cache_to_full_index(trained, tiny_docs, tmp_path):
    root, output, _ = trained
    model = str(output / "model")
    beta = SiDRBetaRetriever.build(tiny_docs, tmp_path / "bot", model=model)
    full = SiDRFullRetriever.build(tiny_docs, tmp_path / "full", model=model)
    # its terms named by the document encoder's tokenizer (a SiDR model keeps one per encoder, none at its top)
    top = full.search("cats and dogs", k=1)[0]
    assert full.explain("cats and dogs", top.id).score == pytest.approx(top.score, rel=1e-5)
    assert full.document_terms(top.id) and full.analyze("cats and dogs")
    rerank = LateParametricRetriever.open(tmp_path / "bot", model=model, rerank_depth=3)
    reopened = open_retriever(tmp_path / "bot")  # no model named: the one it was built with, not the packaged one
    assert reopened.query_side.model == str((output / "model").resolve())
    assert reopened.search("cats and dogs", k=5) == beta.search("cats and dogs", k=5)
    assert LateParametricRetriever.open(tmp_path / "bot", rerank_depth=3).query_side.model == reopened.query_side.model
    queries = ["cats and dogs", "statins cancer"]
    beta_hits = beta.search(queries, k=5)
    full_hits = full.search(queries, k=6)  # every document: the full order of the re-ranked ones
    rerank_hits = rerank.search(queries, k=5)
    assert all(len(ids) >= 3 for ids in beta_hits.ids + full_hits.ids)
    assert [len(ids) for ids in rerank_hits.ids] == [len(ids) for ids in beta_hits.ids]
    # re-ranking re-orders beta's top-3 by the full parametric scores, keeping the rest in beta order
    for b_ids, r_ids, r_scores, f_ids in zip(beta_hits.ids, rerank_hits.ids, rerank_hits.scores, full_hits.ids):
        assert set(r_ids[:3]) == set(b_ids[:3]) and r_ids[3:] == b_ids[3:5]
        assert r_scores == sorted(r_scores, reverse=True)
        assert [d for d in f_ids if d in r_ids[:3]] == r_ids[:3]
    costs = rerank.query_side.cost_figures()
    assert costs["rerank_pairs"] == 6 and costs["documents_embedded"] == costs["distinct_candidates"] <= 6
    rerank.search(queries, k=5)
    assert rerank.query_side.cost_figures()["documents_embedded"] == costs["documents_embedded"]  # all cached now
    converted = cache_to_full_index(rerank, tmp_path / "from-cache")
    q = full.encode_queries(queries)
    assert converted.search(q, k=5).ids == full.index.search(q, k=5).ids


def test_sidr_indexes_and_the_rerank_cache_notice_a_model_retrained_in_place(trained, tiny_docs, tmp_path):
    """A full index refuses the queries of a model retrained into its folder; re-ranking starts a cache of the
    new weights instead of scoring with the old ones' document vectors."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(trained[1] / "model", model)
    SiDRFullRetriever.build(tiny_docs, tmp_path / "full", model=str(model))
    SiDRBetaRetriever.build(tiny_docs, tmp_path / "bot", model=str(model))
    first = LateParametricRetriever.open(tmp_path / "bot", model=str(model), rerank_depth=3)
    first.search(["cats and dogs"], k=3)
    embedded = first.query_side.cost_figures()["documents_embedded"]
    assert embedded > 0
    retrained = SiDRModel.load(str(model))
    with torch.no_grad():
        for parameter in retrained.parameters():
            parameter.add_(0.01)
    retrained.save(model)
    with pytest.raises(SemiretError, match="full was built with other weights than .*model holds now"):
        SiDRFullRetriever.open(tmp_path / "full").search(["cats and dogs"], k=3)
    again = LateParametricRetriever.open(tmp_path / "bot", model=str(model), rerank_depth=3)
    again.search(["cats and dogs"], k=3)
    assert again.query_side.cost_figures()["documents_embedded"] == embedded
    assert len(list((tmp_path / "bot" / "embedding-cache").iterdir())) == 2


def test_re_ranking_embeds_a_replaced_document_anew(trained, tiny_docs, tmp_path):
    """The embedding cache keys a document by its id and text: one replaced under its id is re-ranked with the
    new text's vector (as a fresh build scores it), never the old one's."""
    model = str(trained[1] / "model")
    late = LateParametricRetriever.build(tiny_docs, tmp_path / "bot", model=model, rerank_depth=6)
    query = "cats and dogs"
    before = {h.id: h.score for h in late.search(query, k=6)}
    target = next(iter(before))
    reads = []
    get_document = type(late.index).get_document
    with pytest.MonkeyPatch.context() as patch:  # while the index is at one commit, candidates' texts are read once
        patch.setattr(type(late.index), "get_document", lambda self, i: reads.append(i) or get_document(self, i))
        assert {h.id: h.score for h in late.search(query, k=6)} == before and reads == []
    late.add([Document(target, "Quarterly tax filings for small businesses.")], replace=True)
    after = {h.id: h.score for h in late.search(query, k=6)}
    fresh = LateParametricRetriever.build(
        [d if d.id != target else Document(target, "Quarterly tax filings for small businesses.") for d in tiny_docs],
        tmp_path / "fresh", model=model, rerank_depth=6)
    expected = {h.id: h.score for h in fresh.search(query, k=6)}
    assert target in after and after[target] != before[target]
    assert after[target] == pytest.approx(expected[target], rel=1e-5)
    assert late.query_side.cost_figures()["documents_embedded"] == len(tiny_docs) + 1


def test_sparse_queries_shift_back_to_tokenizer_ids(tiny_mlm):
    model = SiDRModel.initialise(tiny_mlm, shared=True, top_k=10, query_max_length=16)
    encoder = model.query_encoder
    batch = next(encoder.inputs.batches(["hello world"], 1))
    vectors = encoder(batch.input_ids, batch.attention_mask, sparse=True)
    [query] = sparse_queries(encoder, vectors)
    assert len(query.terms) == 10 and query.terms.min() >= 999
    expected = encoder.encode_query(["hello world"]).to_queries()[0]
    # training locates the top-k in bfloat16, inference exactly: at most a boundary entry may differ
    assert len(set(query.terms.tolist()) & set(expected.terms.tolist())) >= 8


def test_a_checkpoint_of_another_model_type_is_refused(tmp_path):
    from semiret.models.sidr import SiDRModel

    other = tmp_path / "if-model"
    other.mkdir()
    (other / "inference-free.json").write_text("{}")
    with pytest.raises(SemiretError, match="inference-free"):
        SiDRModel.load(str(other))


def test_cli_turns_the_rerank_cache_into_the_full_index(trained, tiny_docs, tmp_path):
    from typer.testing import CliRunner

    from semiret.cli import app

    root, output, _ = trained
    model = str(output / "model")
    SiDRBetaRetriever.build(tiny_docs, tmp_path / "bot", model=model)
    runner = CliRunner()
    searched = runner.invoke(app, ["search", "cats and dogs", "--index", str(tmp_path / "bot"), "-r", "sidr-beta-rerank",
                                   "--model", model, "--rerank-depth", "2", "--json"])
    assert searched.exit_code == 0, searched.output
    result = runner.invoke(app, ["cache-to-full", "--index", str(tmp_path / "bot"), "--out", str(tmp_path / "full"),
                                 "--model", model])
    assert result.exit_code == 0, result.output
    assert "2 documents came from the cache" in result.output
    full = SiDRFullRetriever.open(tmp_path / "full")
    assert full.index.n_docs == len(tiny_docs)
    direct = SiDRFullRetriever.build(tiny_docs, tmp_path / "direct", model=model)
    assert full.search(["statins cancer"], k=3).ids == direct.search(["statins cancer"], k=3).ids


def test_query_top_k_keeps_the_heaviest_terms_for_beta_search_only(trained, tiny_docs, tmp_path):
    root, output, _ = trained
    model = str(output / "model")
    SiDRBetaRetriever.build(tiny_docs, tmp_path / "bot", model=model)
    full = SiDRBetaRetriever.open(tmp_path / "bot", model=model)
    narrow = SiDRBetaRetriever.open(tmp_path / "bot", model=model, query_top_k=3)
    whole, = full.encode_queries(["cats and dogs statins"])
    kept, = narrow.encode_queries(["cats and dogs statins"])
    assert len(kept.terms) == 3 < len(whole.terms)
    heaviest = set(whole.terms[np.argsort(-whole.weights)[:3]].tolist())
    assert set(kept.terms.tolist()) == heaviest and list(kept.terms) == sorted(kept.terms)
    # re-ranking scores the candidates with the whole query vector, whatever the first stage kept
    n, half = len(tiny_docs), len(whole.terms) // 2
    reranked = LateParametricRetriever.open(tmp_path / "bot", model=model, query_top_k=half, rerank_depth=n)
    exact = LateParametricRetriever.open(tmp_path / "bot", model=model, rerank_depth=n)
    got, expected = reranked.search(["cats and dogs statins"], k=n), exact.search(["cats and dogs statins"], k=n)
    exact_score = dict(zip(expected.ids[0], expected.scores[0]))
    assert got.ids[0] and all(s == pytest.approx(exact_score[d], rel=1e-5) for d, s in zip(got.ids[0], got.scores[0]))
    with pytest.raises(SemiretError, match="query_top_k"):
        SiDRBetaRetriever.open(tmp_path / "bot", model=model, query_top_k=0)


def test_demo_builds_the_full_index_from_the_rerank_cache(trained, tmp_path, monkeypatch):
    from semiret import demo

    _, output, _ = trained
    model = str(output / "model")
    root = write_beir(tmp_path / "tiny")  # a test split
    monkeypatch.setattr(demo, "demo_systems", lambda *flags: [
        ("re-rank", "sidr-beta-rerank", {"model": model, "rerank_depth": 2}),
        ("full", "sidr-full", {"model": model, demo.FROM_RERANK_CACHE: True})])
    rerank, full = demo.run_demo(str(root), tmp_path / "out")
    assert full["index_build_s"] is not None and full["documents"] == rerank["documents"]
    direct = SiDRFullRetriever.build(Collection(root).corpus(), tmp_path / "direct", model=model)
    built = SiDRFullRetriever.open(next((tmp_path / "out" / "indexes").glob("*impact*")))
    query = ["statins cancer"]
    assert built.search(query, k=3).ids == direct.search(query, k=3).ids


def test_in_batch_distillation_follows_the_teachers_ranking(tmp_path, tiny_docs):
    """The KL term is lower for a student ranking the batch's passages as the teacher does than for one ranking
    them in reverse, finds passages by document id, and scales with its weight."""
    from semiret.training.distillation import InBatchDistillation
    from semiret.training.teachers import BM25Teacher, TeacherScores

    documents = tiny_docs[:4]
    teacher = TeacherScores(BM25Teacher(), documents, ["q1"], [documents[2].text], None)
    passages = [d.id for d in reversed(documents)]  # rows 3, 2, 1, 0
    teacher_scores = teacher.scores(["q1"], np.array([[3, 2, 1, 0]]))
    assert teacher_scores.argmax() == 1  # the query is document 2's text
    term = InBatchDistillation([teacher], documents, scale=30.0)
    agreeing = term(torch.from_numpy(teacher_scores).float(), ["q1"], passages)
    reversed_ = term(-torch.from_numpy(teacher_scores).float(), ["q1"], passages)
    assert agreeing.terms["kl"] < reversed_.terms["kl"]
    doubled = InBatchDistillation([teacher], documents, scale=30.0, weight=2.0)
    assert doubled(-torch.from_numpy(teacher_scores).float(), ["q1"], passages).total.item() == pytest.approx(
        2 * reversed_.total.item())


def test_training_with_teachers_adds_the_distillation_term(trained, tmp_path):
    """--teachers: the run distils from them beside the contrastive loss (its terms in the summary, their cache
    and manifest in the run folder); a bad teacher list or weight fails before any compute."""
    root, output, summary = trained
    config = SiDRTrainingConfig(**{**summary["config"], "output": str(tmp_path / "run"), "teachers": "bm25"})
    distilled = train_sidr(config)
    terms = distilled["terms_per_epoch"]
    assert all({"parametric", "semi_parametric", "kl", "student_scale"} <= set(t) for t in terms)
    assert all(np.isfinite(t["kl"]) and t["kl"] >= 0 for t in terms)
    assert json.loads((tmp_path / "run" / "teachers.json").read_text()) == ["bm25:bm25"]
    assert "kl" not in summary["terms_per_epoch"][0]  # without teachers, the paper's loss alone
    with pytest.raises(SemiretError, match="unknown teacher"):
        SiDRTrainingConfig(data=".", output=str(tmp_path), teachers="oracle").validate()
    with pytest.raises(SemiretError, match="distillation-weight"):
        SiDRTrainingConfig(data=".", output=str(tmp_path), teachers="bm25", distillation_weight=0).validate()


def test_a_trained_sidr_base_takes_the_shape_given_and_refuses_another_head(tmp_path, tiny_bert):
    """``train sidr --base <trained SiDR>`` went on with the saved model's top-k and lengths whatever the flags
    said; now the flags given apply, those left out keep the saved model's, and a head or sharing the saved model
    was not trained with is an error, not ignored."""
    from semiret.methods.sidr import INITIAL_SHAPE
    from semiret.models.sidr import SiDRModel

    fresh = starting_sidr_model(str(tiny_bert))
    assert (fresh.shared, fresh.query_encoder.head, fresh.query_encoder.top_k,
            fresh.query_encoder.max_length) == tuple(INITIAL_SHAPE.values())[:4]  # the tiny model reads 64 at most
    SiDRModel.initialise(str(tiny_bert), top_k=40, query_max_length=16, document_max_length=32).save(tmp_path / "m")
    kept = starting_sidr_model(str(tmp_path / "m"))
    assert (kept.query_encoder.top_k, kept.query_encoder.max_length, kept.document_encoder.max_length) == (40, 16, 32)
    reshaped = starting_sidr_model(str(tmp_path / "m"), top_k=7, document_max_length=20, head="mlm", shared=False)
    assert (reshaped.document_encoder.top_k, reshaped.query_encoder.max_length,
            reshaped.document_encoder.max_length) == (7, 16, 20)
    vectors = reshaped.document_encoder.encode_document(["a b c d e f g h i j"] * 2)
    assert vectors.nnz().max() == 7
    with pytest.raises(SemiretError, match=r"trained SiDR model \(shared: False, head: mlm\).* --head fresh"):
        starting_sidr_model(str(tmp_path / "m"), head="fresh")
    with pytest.raises(SemiretError, match=r"with --shared \(leave"):
        starting_sidr_model(str(tmp_path / "m"), shared=True)


def test_a_hybrid_built_around_a_re_ranking_part_stores_the_texts_it_embeds(tmp_path, tiny_docs):
    """sidr-beta-rerank embeds its candidates' stored texts from its own part: a hybrid built from the corpus stores
    them there too (it kept them in its BM25 part only, and every search failed), documents added later as well
    (the packaged SiDR model re-ranks)."""
    from semiret.search import HybridRetriever

    hybrid = HybridRetriever.build(tiny_docs, tmp_path / "hybrid", neural="sidr-beta-rerank")
    assert hybrid.index.parts["neural"].meta["store_texts"] and hybrid.search("cats and dogs", k=3)
    hybrid.add([Document("new", "a brand new note on cats")])
    found = HybridRetriever.open(tmp_path / "hybrid").search("brand new cats", k=3)
    assert found and "new" in [hit.id for hit in found]
    bot = HybridRetriever.build(tiny_docs, tmp_path / "plain", neural="sidr-beta")
    assert not bot.index.parts["neural"].meta["store_texts"]  # a part that reads none keeps none


def test_tuning_bm25_beside_a_re_ranking_part_embeds_nothing_again(tmp_path, tiny_docs, monkeypatch):
    """Each BM25 setting is searched on a copy of the hybrid, which reads the original's embedding cache (by content)
    rather than embed every candidate again."""
    from semiret.evaluation.tuning import grid_search
    from semiret.search import HybridRetriever
    from semiret.search.semiparametric import LateParametricQueries

    from helpers import TINY_QRELS, TINY_QUERIES

    hybrid = HybridRetriever.build(tiny_docs, tmp_path / "hybrid", neural="sidr-beta-rerank")
    embedded = []
    embed = LateParametricQueries._embed_missing

    def counting(self, documents):
        keys = embed(self, documents)
        embedded.append(self.documents_embedded)
        return keys

    monkeypatch.setattr(LateParametricQueries, "_embed_missing", counting)
    settings = grid_search(hybrid, TINY_QUERIES, TINY_QRELS, {"k1": [0.5, 1.0, 2.0]}, depth=10)
    assert len(settings) == 4 and embedded[0] > 0 and all(count == 0 for count in embedded[1:])
    assert not list(tmp_path.glob(".semiret-tune-*"))  # the copies, beside the index, removed
