"""The model registry: offline names, clear errors for what is not a model."""

from __future__ import annotations

import pytest

from semiret.errors import SemiretError
from semiret.data.packaged import REGISTRY, gguf_file, model_directory, resolve_model_path
from semiret.models.loading import load_tokenizer


def test_registry_names_resolve_offline():
    for name in REGISTRY:
        assert resolve_model_path(name).is_dir()
    assert (model_directory("splade-tiny") / "config.json").is_file()
    assert gguf_file("smollm2-135m") == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert gguf_file("minilm") is None
    assert load_tokenizer("minilm").is_fast


def test_unknown_model_lists_known_names():
    with pytest.raises(SemiretError, match=r"unknown model 'no-such-model'.*minilm, smollm2-135m, splade-tiny"):
        resolve_model_path("no-such-model")
    with pytest.raises(SemiretError, match=r"did you mean 'hce-scifact'\?"):  # trained models shipped too
        resolve_model_path("hce-scifac")
    with pytest.raises(SemiretError, match=r"'hce-scifact' is a trained model shipped in semiret, not a base model"):
        resolve_model_path("hce-scifact")  # as a base (--base), where only base models go


def test_the_hub_id_of_an_installed_packaged_model_needs_no_download(monkeypatch):
    """``sentence-transformers/all-MiniLM-L6-v2`` is the packaged ``minilm``: found offline, the hub never asked."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: pytest.fail("asked the hub"))
    assert resolve_model_path("sentence-transformers/all-MiniLM-L6-v2") == resolve_model_path("minilm")
    assert resolve_model_path("rasyosef/splade-tiny") == resolve_model_path("splade-tiny")


def test_directory_that_is_not_a_model(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SemiretError, match="is not a model directory .*models available offline: minilm"):
        model_directory(str(tmp_path))
    with pytest.raises(SemiretError, match="is not a model directory"):
        resolve_model_path(str(tmp_path / "notes.txt"))


def test_broken_model_directory_is_a_clear_error(tmp_path):
    from semiret.models.loading import load_masked_lm

    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(SemiretError, match="cannot load"):
        load_masked_lm(str(tmp_path))


def test_a_model_copied_over_another_is_whole_or_not_there(tmp_path, monkeypatch):
    """``semiret adapt`` publishes its adapted (or kept) model by copying it over the run's ``model`` folder: a copy
    that fails half-way leaves the model that was there whole (it used to be removed first, then copied)."""
    import shutil

    from semiret.models import base

    source, target = tmp_path / "adapted", tmp_path / "model"
    for folder, text in ((source, "new"), (target, "old")):
        folder.mkdir()
        (folder / "a.json").write_text(text)
        (folder / "b.json").write_text(text)

    def copy_then_fail(src, dst, **options):
        shutil.copy(src / "a.json", dst / "a.json")
        raise OSError("disk full")

    monkeypatch.setattr(base.shutil, "copytree", copy_then_fail)
    with pytest.raises(OSError, match="disk full"):
        base.copy_model_directory(source, target)
    assert {p.name: p.read_text() for p in target.iterdir()} == {"a.json": "old", "b.json": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapted", "model"]  # no staging folder left
    monkeypatch.undo()
    base.copy_model_directory(source, target)
    assert {p.name: p.read_text() for p in target.iterdir()} == {"a.json": "new", "b.json": "new"}


def test_an_index_made_before_its_packaged_model_took_other_weights_is_refused(tmp_path, tiny_bert):
    """Indexes before 2026-11-28 record no fingerprint of their model's weights: one made with the packaged
    hce-scifact before it was replaced (11-27) was searched with today's, 25 queries of 25 answered otherwise."""
    import json

    from semiret.data.packaged import PACKAGED_CHECKPOINTS
    from semiret.models.checkpoints import replaced_weights
    from semiret.search import open_retriever, retriever_class

    from helpers import TINY_DOCS

    retriever_class("dense").build(TINY_DOCS, tmp_path / "idx", model=str(tiny_bert))
    meta_path = tmp_path / "idx" / "meta.json"
    meta = json.loads(meta_path.read_text())
    analyzer = {k: v for k, v in meta["analyzer"].items() if k != "weights"}
    for model in ("hce-scifact", "/old/venv/site-packages/semiret/checkpoints/hce-scifact"):
        meta_path.write_text(json.dumps({**meta, "created": "2026-11-26T12:00:00",
                                         "analyzer": {**analyzer, "model": model}}))
        with pytest.raises(SemiretError, match=r"was made 2026-11-26T12:00:00 with the packaged hce-scifact, which "
                                               r"took other weights on 2026-11-27T21:16:50 .* rebuild it"):
            open_retriever(tmp_path / "idx")
    made_after = {**meta, "created": "2026-11-27T22:00:00", "analyzer": {**analyzer, "model": "hce-scifact"}}
    assert replaced_weights(made_after) is None  # made with today's weights
    recorded = {**meta, "created": "2026-11-26T12:00:00", "analyzer": {**analyzer, "model": "hce-scifact",
                                                                       "weights": "abc"}}
    assert replaced_weights(recorded) is None  # a fingerprint: checked when the model loads
    (tmp_path / "mine" / "hce-scifact").mkdir(parents=True)  # a model of the user's that bears the name
    own = {**meta, "created": "2026-11-26T12:00:00", "analyzer": {**analyzer, "model": str(tmp_path / "mine" /
                                                                                         "hce-scifact")}}
    assert replaced_weights(own) is None and (PACKAGED_CHECKPOINTS / "hce-scifact").is_dir()
