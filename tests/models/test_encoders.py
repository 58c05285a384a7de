"""Encoders on tiny random models: fast paths equal the textbook computations, bad input is reported."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from helpers import MAX_POSITIONS, naive_splade

from semiret.data.packaged import model_directory
from semiret.errors import SemiretError
from semiret.models.dense import DenseEncoder, sentence_transformers_defaults
from semiret.models.encoders import load_encoder
from semiret.models.splade import SpladeEncoder
from semiret.models.vdr import VDREncoder
from semiret.models.vocabulary import MaxPooledLogits

TEXTS = ["Cats chase mice in the garden.", "Statins reduce the risk of heart disease.",
         "A much longer document " + "about many different things " * 4, "birds"]


# ---------------------------------------------------------------------- the exact screened projection
@pytest.mark.parametrize("screen", [True, False])
@pytest.mark.parametrize("rule", [{"threshold": 0.0}, {"threshold": 0.5}, {"top_k": 50}])
def test_max_pooled_logits_equal_float32(screen, rule):
    torch.manual_seed(0)
    weight, bias = torch.randn(5000, 24), torch.randn(5000) * 0.5 - 1.0
    pool = MaxPooledLogits(weight, bias, screen=screen, **rule)
    for length in (1, 7, 40):
        hidden = torch.randn(length, 24)
        maxima = (hidden @ weight.T + bias).amax(0)
        ids, values = pool(hidden)
        if "threshold" in rule:
            expected = torch.nonzero(maxima > rule["threshold"]).squeeze(1)
        else:
            expected = maxima.topk(rule["top_k"]).indices.sort().values
        assert torch.equal(ids, expected)
        torch.testing.assert_close(values, maxima[expected], rtol=1e-5, atol=1e-5)


def test_training_maxima_are_located_tile_by_tile_as_in_one_product():
    """On a CPU, training locates each entry's best position over vocabulary tiles of each text's unpadded
    positions: the same values and positions as the masked [batch, length, |V|] product."""
    from semiret.models.pooled_projection import _locate_maxima

    torch.manual_seed(0)
    states, weight = torch.randn(3, 9, 16), torch.randn(9000, 16)  # three vocabulary tiles, the last one partial
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 4:] = 0  # a padded text
    mask[2] = 0  # and an empty one
    best = (states @ weight.T).masked_fill(~mask.bool().unsqueeze(-1), float("-inf")).max(dim=1)
    values, positions = _locate_maxima(states, mask, weight, torch.float32)
    torch.testing.assert_close(values, best.values, rtol=1e-6, atol=1e-6)
    assert torch.equal(positions[:2], best.indices[:2]) and int(positions[1].max()) < 4
    assert torch.all(values[2] == float("-inf"))


def off_the_cpu(encoder, monkeypatch):
    """``encoder`` made to take the path it takes on a GPU (the training kernels over the whole batch, then each
    row's entries), here on the CPU, locating maxima in float32 so that it is compared exactly."""
    monkeypatch.setattr("semiret.models.pooled_projection.native_bfloat16", lambda: False)
    monkeypatch.setattr(encoder, "_prepare", lambda: None)
    return encoder


def pools_seen(encoder, monkeypatch) -> list:
    """The pools ``encoder``'s batches are encoded with, as they are (None: the path off the CPU)."""
    seen, encode_batch = [], encoder._encode_batch
    monkeypatch.setattr(encoder, "_encode_batch", lambda batch, side, pool: seen.append(pool) or encode_batch(
        batch, side, pool))
    return seen


# ---------------------------------------------------------------------- SPLADE
@pytest.mark.parametrize("model_fixture", ["tiny_bert", "tiny_distilbert"])
@pytest.mark.parametrize("device_path", ["cpu", "off-cpu"])
def test_splade_matches_naive_forward(model_fixture, device_path, request, monkeypatch):
    directory = request.getfixturevalue(model_fixture)
    encoder = SpladeEncoder.from_pretrained(str(directory))
    if device_path == "off-cpu":
        off_the_cpu(encoder, monkeypatch)
    pools = pools_seen(encoder, monkeypatch)
    vectors = encoder.encode_document(TEXTS, batch_size=3, show_progress=False)
    np.testing.assert_allclose(vectors.to_dense(), naive_splade(directory, TEXTS), atol=1e-5)
    assert pools and all((pool is None) == (device_path == "off-cpu") for pool in pools)
    assert vectors.dim == 30522 and len(vectors) == len(TEXTS)
    assert all(np.all(np.diff(vectors.row(i)[0]) > 0) for i in range(len(TEXTS)))  # ascending ids


def test_splade_forward_is_differentiable_and_matches_inference(tiny_bert):
    encoder = SpladeEncoder.from_pretrained(str(tiny_bert))
    batch = encoder.tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    encoder.train()
    pooled = encoder(batch["input_ids"], batch["attention_mask"])
    pooled.sum().backward()
    assert encoder.backbone.cls.predictions.bias.grad is not None
    encoder.eval()
    with torch.no_grad():
        pooled = encoder(batch["input_ids"], batch["attention_mask"])
    np.testing.assert_allclose(pooled.numpy(), encoder.encode_query(TEXTS[:2]).to_dense(), atol=1e-5)
    assert not encoder.training  # encoding leaves the mode as it found it


def test_empty_texts_truncation_and_bad_input(tiny_bert, caplog):
    encoder = SpladeEncoder.from_pretrained(str(tiny_bert))
    long_text = "word " * (MAX_POSITIONS * 3)
    with caplog.at_level(logging.WARNING):
        vectors = encoder.encode_document(["", "   ", long_text, long_text], show_progress=False)
        encoder.encode_document([long_text], show_progress=False)
    assert list(vectors.nnz()[:2]) == [0, 0] and vectors.nnz()[2] > 0
    messages = [r.getMessage() for r in caplog.records]
    assert sum("are encoded, as the model was trained" in m for m in messages) == 1  # said once
    assert any("2 empty document texts" in m for m in messages)
    np.testing.assert_allclose(vectors.to_dense()[2], naive_splade(tiny_bert, [long_text])[0], atol=1e-5)
    with pytest.raises(SemiretError, match="item 1 is a int"):
        encoder.encode_query(["fine", 3])
    with caplog.at_level(logging.WARNING):
        assert SpladeEncoder.from_pretrained(str(tiny_bert), max_length=1000).max_length == MAX_POSITIONS
    assert "max_length 1000 exceeds" in caplog.records[-1].getMessage()
    with pytest.raises(SemiretError, match="at least 2 tokens"):
        SpladeEncoder.from_pretrained(str(tiny_bert), max_length=1)
    with pytest.raises(SemiretError, match="batch size"):
        encoder.encode_query(["x"], batch_size=0)


def test_save_and_load_round_trip(tiny_bert, tmp_path):
    encoder = SpladeEncoder.from_pretrained(str(tiny_bert), max_length=32)
    loaded = load_encoder(str(encoder.save(tmp_path / "saved")))
    assert isinstance(loaded, SpladeEncoder) and loaded.max_length == 32
    np.testing.assert_array_equal(loaded.encode_query(TEXTS).to_dense(), encoder.encode_query(TEXTS).to_dense())
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(SemiretError, match="refusing to overwrite"):
        encoder.save(tmp_path / "other")
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SemiretError, match="is a file, not a folder"):  # (a NotADirectoryError)
        encoder.save(tmp_path / "notes.txt")
    assert (tmp_path / "notes.txt").read_text() == "mine"
    with pytest.raises(SemiretError, match="say which family"):
        load_encoder(str(tiny_bert))
    with pytest.raises(SemiretError, match="unknown encoder family 'colbert'"):
        load_encoder(str(tiny_bert), "colbert")


def test_an_encoder_saved_as_its_difference_from_its_base(tiny_bert, tmp_path):
    """Only the weights fine-tuning changed are written; loading reads the rest from the base and gives the
    same vectors (in float32; in float16 within its rounding)."""
    from safetensors import safe_open

    from semiret.models.base import DELTA_FILE

    encoder = DenseEncoder.from_pretrained(str(tiny_bert), max_length=32)
    with torch.no_grad():
        encoder.backbone.encoder.layer[1].output.dense.weight.add_(0.1)
    expected = encoder.encode_query(TEXTS)
    saved = encoder.save(tmp_path / "delta", base=str(tiny_bert))
    with safe_open(str(saved / DELTA_FILE), "pt") as delta:  # the tiny model's pooler is not saved: drawn anew
        assert set(delta.keys()) - {"pooler.dense.weight", "pooler.dense.bias"} == {"encoder.layer.1.output.dense.weight"}
    assert not (saved / "model.safetensors").exists()
    loaded = load_encoder(str(saved))
    assert loaded.name == str(saved) and loaded.max_length == 32
    np.testing.assert_allclose(loaded.encode_query(TEXTS), expected, atol=1e-6)
    half = load_encoder(str(encoder.save(tmp_path / "delta-half", fp16=True, base=str(tiny_bert))))
    np.testing.assert_allclose(half.encode_query(TEXTS), expected, atol=0.02)
    with pytest.raises(SemiretError, match="not .* architecture"):  # a masked LM against the bare encoder
        SpladeEncoder.from_pretrained(str(tiny_bert)).save(tmp_path / "wrong", base=str(tiny_bert))


def test_a_matrix_changed_in_few_rows_is_saved_as_those_rows(tiny_bert, tmp_path):
    """Word embeddings fine-tuning changed for a few tokens only: the delta holds those rows and their numbers, and
    loading puts them back into the base's matrix (the same vectors); rows that do not fit the base are refused."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from semiret.models.base import DELTA_FILE, DELTA_ROWS

    name = "embeddings.word_embeddings.weight"
    encoder = DenseEncoder.from_pretrained(str(tiny_bert), max_length=32)
    rows = encoder.tokenizer(TEXTS[0])["input_ids"][1:4]
    with torch.no_grad():
        encoder.backbone.embeddings.word_embeddings.weight[rows] += 0.5
    expected = encoder.encode_query(TEXTS)
    saved = encoder.save(tmp_path / "rows", base=str(tiny_bert))
    with safe_open(str(saved / DELTA_FILE), "pt") as delta:
        assert delta.get_tensor(name).shape == (3, 32) and delta.get_tensor(name + DELTA_ROWS).tolist() == sorted(rows)
    np.testing.assert_allclose(load_encoder(str(saved)).encode_query(TEXTS), expected, atol=1e-6)
    delta = load_file(str(saved / DELTA_FILE))
    delta[name + DELTA_ROWS] = torch.tensor([0, 1, 10 ** 6])
    save_file(delta, str(saved / DELTA_FILE))
    with pytest.raises(SemiretError, match="changed rows of embeddings.word_embeddings.weight do not fit"):
        load_encoder(str(saved))


def test_saving_in_float16_leaves_the_encoder_unrounded(tiny_bert, tmp_path):
    """A model saved in mid-training (HCE's best epoch so far) keeps training on its float32 weights, bit for bit."""
    encoder = DenseEncoder.from_pretrained(str(tiny_bert), max_length=32)
    with torch.no_grad():
        for parameter in encoder.parameters():
            parameter.add_(1e-4 * torch.randn_like(parameter))  # bits that float16 cannot hold
    before = {name: value.clone() for name, value in encoder.state_dict().items()}
    parameters = list(encoder.parameters())
    encoder.save(tmp_path / "half", fp16=True)
    after = encoder.state_dict()
    assert all(torch.equal(before[name], after[name]) and after[name].dtype == before[name].dtype for name in before)
    assert all(a is b for a, b in zip(parameters, encoder.parameters()))  # an optimizer's references still hold


def test_automatic_precision_is_saved_as_automatic(tiny_bert, tmp_path):
    """bfloat16 pays only on some CPUs: a model saved on one machine decides again on the next."""
    import json

    encoder = DenseEncoder.from_pretrained(str(tiny_bert), max_length=32)
    assert encoder.precision in ("bfloat16", "float32")
    saved = json.loads((encoder.save(tmp_path / "auto") / "semiret-encoder.json").read_text())
    assert saved["precision"] == "auto"
    fixed = DenseEncoder.from_pretrained(str(tiny_bert), max_length=32, precision="float32")
    assert json.loads((fixed.save(tmp_path / "fixed") / "semiret-encoder.json").read_text())["precision"] == "float32"


# ---------------------------------------------------------------------- VDR / SiDR
def naive_vdr(encoder: VDREncoder, texts: list[str]) -> np.ndarray:
    batch = encoder.tokenizer(texts, padding=True, truncation=True, max_length=MAX_POSITIONS, return_tensors="pt")
    with torch.no_grad():
        dense = encoder(batch["input_ids"], batch["attention_mask"])
        return encoder.sparsify(dense).numpy()


@pytest.mark.parametrize("head", ["fresh", "mlm"])
@pytest.mark.parametrize("device_path", ["cpu", "off-cpu"])
def test_vdr_matches_naive_top_k(tiny_bert, head, device_path, monkeypatch):
    encoder = VDREncoder.from_pretrained(str(tiny_bert), head=head, top_k=40)
    if device_path == "off-cpu":
        off_the_cpu(encoder, monkeypatch)
    pools = pools_seen(encoder, monkeypatch)
    vectors = encoder.encode_document(TEXTS, show_progress=False)
    assert list(vectors.nnz()) == [40] * len(TEXTS)
    assert vectors.terms.min() >= 999  # the vocabulary shift: [PAD], [unused*], [CLS]... never appear
    expected = np.zeros((len(TEXTS), 30522), np.float32)
    expected[:, 999:] = naive_vdr(encoder, TEXTS)
    np.testing.assert_allclose(vectors.to_dense(), expected, atol=1e-5)
    assert pools and all((pool is None) == (device_path == "off-cpu") for pool in pools)


@pytest.mark.parametrize("family", ["splade", "vdr"])
def test_threads_encoding_at_once_get_what_each_alone_gets(tiny_bert, family):
    """A server encodes its searches' queries in threads at once: each call's scratch is its own (one shared by
    the encoder made threads overwrite each other's maxima: 28 of 192 SPLADE-tiny queries came out wrong)."""
    import threading

    encoder = (SpladeEncoder.from_pretrained(str(tiny_bert)) if family == "splade"
               else VDREncoder.from_pretrained(str(tiny_bert), top_k=40))
    texts = [f"{TEXTS[i % len(TEXTS)]} {' '.join(['words'] * (i % 7))}" for i in range(24)]
    alone = [encoder.encode_query([text], show_progress=False).to_dense() for text in texts]
    wrong = []

    def encode(offset: int) -> None:
        for _ in range(6):
            for i in range(offset, len(texts), 4):
                if not np.array_equal(encoder.encode_query([texts[i]], show_progress=False).to_dense(), alone[i]):
                    wrong.append(i)

    threads = [threading.Thread(target=encode, args=(offset,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong


def test_float16_checkpoints_load_as_float32(tiny_bert, tmp_path):
    """Weights are stored in float16 to stay small and computed in float32 (fast on CPUs)."""
    encoder = SpladeEncoder.from_pretrained(str(tiny_bert), max_length=32)
    expected = encoder.encode_document(TEXTS).to_dense()
    encoder.half().save(tmp_path / "half")
    loaded = load_encoder(str(tmp_path / "half"))
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    np.testing.assert_allclose(loaded.encode_document(TEXTS).to_dense(), expected, atol=0.05)


def test_vdr_fresh_head_is_saved_and_bag_of_tokens(tiny_bert, tmp_path):
    encoder = VDREncoder.from_pretrained(str(tiny_bert), top_k=30)
    with torch.no_grad():
        encoder.norm.weight.uniform_(0.5, 1.5)  # as if trained: must survive save/load
    loaded = load_encoder(str(encoder.save(tmp_path / "vdr")))
    assert isinstance(loaded, VDREncoder) and loaded.top_k == 30
    np.testing.assert_array_equal(loaded.encode_query(TEXTS).to_dense(), encoder.encode_query(TEXTS).to_dense())
    batch = encoder.tokenizer(["cats chase mice"], return_tensors="pt")
    bot = encoder.bag_of_tokens(batch["input_ids"], batch["attention_mask"])
    ids = [i - 999 for i in encoder.tokenizer("cats chase mice", add_special_tokens=False)["input_ids"]]
    assert sorted(torch.nonzero(bot[0]).squeeze(1).tolist()) == sorted(ids)


def test_a_damaged_saved_encoder_is_an_error_naming_its_file(tiny_bert, tmp_path):
    """A cut-off semiret-encoder.json or one without its family gave a traceback; a missing head.safetensors
    loaded the encoder with an untrained head, silently."""
    import json
    import shutil

    saved = VDREncoder.from_pretrained(str(tiny_bert), top_k=30).save(tmp_path / "vdr")
    for damage, message in (
            (lambda copy: (copy / "semiret-encoder.json").write_text('{"family": "vd'), "cannot read .*semiret-encoder"),
            (lambda copy: (copy / "semiret-encoder.json").write_text(json.dumps({"top_k": 30})),
             "semiret-encoder.json names no encoder family"),
            (lambda copy: (copy / "head.safetensors").unlink(), "head of its own, and its head.safetensors is missing"),
            (lambda copy: (copy / "head.safetensors").write_bytes(b"\0" * 16), "cannot read the weights in .*head")):
        copy = tmp_path / "copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(saved, copy)
        damage(copy)
        with pytest.raises(SemiretError, match=message):
            load_encoder(str(copy))


# ---------------------------------------------------------------------- dense
def test_dense_mean_cls_normalize(tiny_bert):
    mean = DenseEncoder.from_pretrained(str(tiny_bert), precision="float32")
    batch = mean.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = mean.backbone(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = (states * mask).sum(1) / mask.sum(1)
    np.testing.assert_allclose(mean.encode_document(TEXTS, show_progress=False), expected.numpy(), atol=1e-5)
    cls = DenseEncoder.from_pretrained(str(tiny_bert), pooling="cls", normalize=True, precision="float32")
    vectors = cls.encode_query(TEXTS + [""])
    np.testing.assert_allclose(vectors[:-1], torch.nn.functional.normalize(states[:, 0], dim=-1).numpy(), atol=1e-5)
    assert not vectors[-1].any()  # empty text: zero vector
    one = cls.encode_query(TEXTS[1])  # one string, one vector, as sentence-transformers gives (was a 1-row matrix)
    assert one.shape == (cls.dim,)
    np.testing.assert_allclose(one, vectors[1], atol=1e-6)
    assert cls.encode_document([TEXTS[1]], show_progress=False).shape == (1, cls.dim)
    assert len(SpladeEncoder.from_pretrained(str(tiny_bert)).encode_query(TEXTS[1])) == 1  # sparse: rows always
    with pytest.raises(SemiretError, match="unknown pooling"):
        DenseEncoder.from_pretrained(str(tiny_bert), pooling="first-last")


def test_dense_bfloat16_close_to_float32(tiny_bert):
    exact = DenseEncoder.from_pretrained(str(tiny_bert), normalize=True, precision="float32").encode_query(TEXTS)
    fast = DenseEncoder.from_pretrained(str(tiny_bert), normalize=True, precision="bfloat16").encode_query(TEXTS)
    assert np.min(np.sum(exact * fast, axis=1)) > 0.99


def test_sentence_transformers_defaults_of_packaged_minilm():
    assert sentence_transformers_defaults(model_directory("minilm")) == {"normalize": True, "pooling": "mean",
                                                                         "max_length": 256, "query_prompt": "",
                                                                         "document_prompt": ""}


@pytest.mark.parametrize("pooling", ["cls", "max", "mean"])
def test_a_folder_sentence_transformers_saved_encodes_as_it_does(tiny_bert, tmp_path, pooling):
    """A folder saved by today's sentence-transformers (``pooling_mode``, its length kept as the tokenizer's) gives
    its vectors (a CLS model was read as mean-pooled, at 256 tokens instead of its 16: 5.1 apart); a module semiret
    does not compute (a Dense projection, another pooling) is an error, not other vectors."""
    from sentence_transformers import SentenceTransformer, models

    folder = tmp_path / pooling
    transformer = models.Transformer(str(tiny_bert), max_seq_length=16)
    model = SentenceTransformer(modules=[transformer, models.Pooling(transformer.get_word_embedding_dimension(),
                                                                     pooling)])
    model.save(str(folder))
    encoder = DenseEncoder.from_pretrained(str(folder), precision="float32")
    assert (encoder.pooling, encoder.max_length, encoder.normalize) == (pooling, 16, True)  # its similarity: cosine
    np.testing.assert_allclose(encoder.encode_document(TEXTS, show_progress=False),
                               model.encode(TEXTS, convert_to_numpy=True, normalize_embeddings=True), atol=1e-5)
    if pooling != "mean":
        return
    projected = SentenceTransformer(modules=[transformer, models.Pooling(transformer.get_word_embedding_dimension()),
                                             models.Dense(transformer.get_word_embedding_dimension(), 8)])
    projected.save(str(tmp_path / "dense"))
    with pytest.raises(SemiretError, match="Dense is not one semiret computes"):
        DenseEncoder.from_pretrained(str(tmp_path / "dense"))
    SentenceTransformer(modules=[transformer, models.Pooling(transformer.get_word_embedding_dimension(),
                                                             "mean_sqrt_len_tokens")]).save(str(tmp_path / "sqrt"))
    with pytest.raises(SemiretError, match="pooling mean_sqrt_len_tokens is not one semiret computes"):
        DenseEncoder.from_pretrained(str(tmp_path / "sqrt"))


def _prompted_folder(tiny_bert, folder, prompts, similarity="dot", include_prompt=True, default=None):
    """A sentence-transformers folder of the tiny BERT, mean-pooled, whose config holds exactly ``prompts`` (as E5's
    and BGE's on the hub: sentence-transformers 6 saves an empty "document" prompt beside them), read back by it."""
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(str(tiny_bert), max_seq_length=32)
    pooling = models.Pooling(transformer.get_embedding_dimension(), "mean", include_prompt=include_prompt)
    SentenceTransformer(modules=[transformer, pooling], similarity_fn_name=similarity).save(str(folder))
    config = folder / "config_sentence_transformers.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "prompts": prompts,
                                  "default_prompt_name": default}))
    return SentenceTransformer(str(folder), device="cpu")


def test_an_embedding_model_s_prompts_are_put_before_its_queries_and_documents(tiny_bert, tmp_path):
    """Models such as E5 and BGE read a query and a document after a prompt of their own, which sentence-transformers'
    ``encode_query`` and ``encode_document`` put there from the model's ``config_sentence_transformers.json``;
    semiret read them without it, so such a model encoded worse than it does, without a word. Its prompts and a
    cosine similarity are now read as sentence-transformers reads them."""
    reference = _prompted_folder(tiny_bert, tmp_path / "e5", {"query": "query: ", "passage": "passage: "}, "cosine")
    encoder = DenseEncoder.from_pretrained(str(tmp_path / "e5"), precision="float32")
    assert encoder.prompts == {"query": "query: ", "document": "passage: "} and encoder.normalize
    np.testing.assert_allclose(encoder.encode_query(TEXTS), reference.encode_query(TEXTS, normalize_embeddings=True),
                               atol=1e-5)
    # (sentence-transformers 6.2 puts an empty "document" prompt before any "passage" one in encode_document, so that
    # it reads an E5 document without the "passage: " its card asks for; semiret reads as sentence-transformers 5 did)
    np.testing.assert_allclose(encoder.encode_document(TEXTS, show_progress=False),
                               reference.encode(TEXTS, prompt_name="passage", normalize_embeddings=True), atol=1e-5)
    plain = DenseEncoder.from_pretrained(str(tmp_path / "e5"), precision="float32", query_prompt="",
                                         document_prompt="")
    assert np.abs(plain.encode_query(TEXTS) - encoder.encode_query(TEXTS)).max() > 1e-3  # the prompt changes them
    np.testing.assert_allclose(encoder.encode_query(TEXTS), plain.encode_query(["query: " + t for t in TEXTS]),
                               atol=1e-6)
    assert load_encoder(str(tmp_path / "e5"), "dense", query_prompt="Q: ").prompts["query"] == "Q: "
    saved = load_encoder(str(encoder.save(tmp_path / "saved")))  # a saved encoder keeps its prompts
    assert saved.prompts == encoder.prompts
    _prompted_folder(tiny_bert, tmp_path / "bge", {"query": "Represent this sentence for searching: "})
    bge = DenseEncoder.from_pretrained(str(tmp_path / "bge"))
    assert bge.prompts == {"query": "Represent this sentence for searching: ", "document": ""} and not bge.normalize
    _prompted_folder(tiny_bert, tmp_path / "default", {"retrieval": "r: ", "other": "o: "}, default="retrieval")
    assert DenseEncoder.from_pretrained(str(tmp_path / "default")).prompts == {"query": "r: ", "document": "r: "}
    _prompted_folder(tiny_bert, tmp_path / "instructor", {"query": "q: "}, include_prompt=False)
    with pytest.raises(SemiretError, match="leaves the prompts' tokens out"):
        DenseEncoder.from_pretrained(str(tmp_path / "instructor"))


def test_positions_that_start_after_padding_limit_the_length():
    """RoBERTa's 514 positions take 512 tokens (its position ids start after the padding id): a limit of 514 let a
    long text fail with an index out of range."""
    from transformers import BertConfig, RobertaConfig, RobertaModel

    from semiret.models.base import position_limit

    roberta = RobertaConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=16, max_position_embeddings=514, pad_token_id=1)
    assert position_limit(roberta) == 512 and position_limit(BertConfig(max_position_embeddings=512)) == 512
    model = RobertaModel(roberta)
    assert model(torch.full((1, 512), 5)).last_hidden_state.shape == (1, 512, 8)
    with pytest.raises((IndexError, RuntimeError)):
        model(torch.full((1, 513), 5))


def test_a_saved_encoder_in_the_packaged_checkpoints_loads_by_name(tiny_bert, tmp_path, monkeypatch):
    from semiret.data import packaged

    load_encoder(str(tiny_bert), "dense", max_length=16).save(tmp_path / "checkpoints" / "dense-tiny", fp16=True)
    monkeypatch.setattr(packaged, "PACKAGED_CHECKPOINTS", tmp_path / "checkpoints")
    encoder = load_encoder("dense-tiny")
    assert isinstance(encoder, DenseEncoder) and encoder.max_length == 16
    with pytest.raises(SemiretError, match="unknown model"):
        load_encoder("not-shipped", "dense")



def test_a_folder_and_a_shipped_model_of_one_name_each_load_as_themselves(tiny_bert, tmp_path, monkeypatch):
    """An encoder saved in a folder named like a registry model (``minilm``) loads its own weights (it loaded the
    registry's, and every search then failed on its fingerprint); a folder of a shipped model's name holding no model
    (an index named after it) does not hide that model; a saved encoder asked for as another family is refused (a
    TypeError, or a SPLADE model read as a dense one)."""
    from semiret.data import packaged

    own = load_encoder(str(tiny_bert), "dense", max_length=16)
    with torch.no_grad():
        own.backbone.embeddings.word_embeddings.weight.mul_(0.9)
    own.save(tmp_path / "minilm")
    load_encoder(str(tiny_bert), "splade").save(tmp_path / "checkpoints" / "splade-tiny-trained")
    monkeypatch.setattr(packaged, "PACKAGED_CHECKPOINTS", tmp_path / "checkpoints")
    monkeypatch.chdir(tmp_path)
    mine = load_encoder("minilm")
    assert mine.dim == own.dim and mine.max_length == 16
    np.testing.assert_allclose(mine.encode_query(TEXTS), own.encode_query(TEXTS), atol=1e-6)
    (tmp_path / "splade-tiny-trained").mkdir()
    (tmp_path / "splade-tiny-trained" / "meta.json").write_text("{}")  # an index named after its model
    assert isinstance(load_encoder("splade-tiny-trained"), SpladeEncoder)
    with pytest.raises(SemiretError, match="is a saved splade encoder, not a dense one"):
        load_encoder("splade-tiny-trained", "dense")
    with pytest.raises(SemiretError, match="is a saved dense encoder, not a splade one"):
        load_encoder("minilm", "splade")


def test_bert_base_uncased_is_a_tokenizer_offline_and_its_weights_the_hubs(monkeypatch):
    """``bert-base-uncased``'s WordPiece vocabulary ships with SPLADE-tiny, so its tokenizer loads offline; its
    weights are BERT-base's, sought from the hub (SPLADE-tiny's 2 layers of 128 were loaded in its name). A registry
    model loads as its family without being told it (it asked for one)."""
    import huggingface_hub

    from semiret.models.loading import load_tokenizer

    assert len(load_tokenizer("bert-base-uncased")) == 30522
    assert isinstance(load_encoder("splade-tiny"), SpladeEncoder)  # a registry model's family is known
    asked = []

    def offline(name, *args, **kwargs):
        asked.append(name)
        raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(SemiretError, match="could not fetch 'bert-base-uncased' from the Hugging Face hub"):
        load_encoder("bert-base-uncased", "dense")
    assert asked == ["bert-base-uncased"]


def test_a_model_folder_missing_its_tokenizer_or_cut_short_is_named(tiny_bert, tmp_path):
    """Without tokenizer files transformers made a tokenizer of 5 placeholder tokens (every word unknown, and an
    index built of that); weights cut short were a safetensors traceback."""
    import shutil

    from semiret.models.loading import load_tokenizer

    bare = tmp_path / "bare"
    shutil.copytree(tiny_bert, bare, ignore=shutil.ignore_patterns("tokenizer*", "vocab*", "special_tokens*"))
    with pytest.raises(SemiretError, match="has no tokenizer files"):
        load_tokenizer(str(bare))
    cut = tmp_path / "cut"
    shutil.copytree(tiny_bert, cut)
    weights = cut / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100_000])
    with pytest.raises(SemiretError, match="cannot load"):
        load_encoder(str(cut), "splade")
    from semiret.models.base import DELTA_FILE

    changed = DenseEncoder.from_pretrained(str(tiny_bert))
    with torch.no_grad():
        changed.backbone.encoder.layer[1].output.dense.weight.add_(0.1)
    saved = changed.save(tmp_path / "saved", base=str(tiny_bert))
    (saved / DELTA_FILE).write_bytes((saved / DELTA_FILE).read_bytes()[:50])
    with pytest.raises(SemiretError, match="cannot read the weights in"):
        load_encoder(str(saved))

def test_a_model_without_an_mlm_head_is_no_masked_lm(tmp_path):
    """A sentence encoder's head would start random (transformers' report of it is silenced): an error instead."""
    from transformers import BertConfig, BertModel

    from semiret.models.loading import load_masked_lm, load_tokenizer

    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=MAX_POSITIONS)).save_pretrained(tmp_path)
    load_tokenizer("splade-tiny").save_pretrained(tmp_path)
    with pytest.raises(SemiretError, match=r"is not a masked language model with its MLM head: \d+ weights are "
                                           r"missing \(cls\.predictions"):
        load_masked_lm(str(tmp_path))
    with pytest.raises(SemiretError, match="MLM head"):
        VDREncoder.from_pretrained(str(tmp_path), head="mlm")
    VDREncoder.from_pretrained(str(tmp_path), head="fresh")  # a fresh head needs none


def test_models_loaded_in_threads_at_once_all_load(tiny_bert):
    """A server's first searches load the retriever's model in threads at once: transformers' loading swaps
    process-wide state, and such loads reported tied weights missing, after which no load in the process succeeded
    (2 runs of 3 here). Each load takes its turn now."""
    import threading

    from semiret.models.loading import load_masked_lm

    for _ in range(3):
        failures = []

        def load() -> None:
            try:
                load_masked_lm(str(tiny_bert))
            except SemiretError as error:
                failures.append(error)

        threads = [threading.Thread(target=load) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures
    assert load_masked_lm(str(tiny_bert)) is not None


# ---------------------------------------------------------------------- sentence-transformers' encode and similarity
def test_encode_reads_documents_and_similarity_scores_as_the_retrievers_rank(tiny_bert):
    """``encode`` is ``encode_document`` (its prompt included); ``similarity`` is the inner product of a dense
    model's vectors and of a sparse model's, one string's vector a row of one."""
    dense = DenseEncoder.from_pretrained(str(tiny_bert), max_length=32, precision="float32",
                                         query_prompt="Q: ", document_prompt="D: ")
    documents = dense.encode(TEXTS, show_progress=False)
    np.testing.assert_array_equal(documents, dense.encode_document(TEXTS, show_progress=False))
    query = dense.encode_query("cats in the garden")
    scores = dense.similarity(query, documents)
    assert scores.shape == (1, len(TEXTS))
    np.testing.assert_allclose(scores[0], [float(query @ d) for d in documents], rtol=1e-6)
    sparse = SpladeEncoder.from_pretrained(str(tiny_bert))
    queries, documents = sparse.encode_query(TEXTS[:2]), sparse.encode(TEXTS, show_progress=False)
    np.testing.assert_allclose(sparse.similarity(queries, documents),
                               queries.to_dense() @ documents.to_dense().T, rtol=1e-5)
