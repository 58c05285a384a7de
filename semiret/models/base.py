"""The encoder base: a torch module around a transformers backbone with the sentence-transformers
calling convention (``encode_query`` / ``encode_document``), batching, progress, save and load.

A saved encoder is a directory in the transformers format (``config.json``, ``model.safetensors``,
tokenizer files) plus ``semiret-encoder.json`` (family and options) and, when the encoder has weights
outside the backbone (a fresh LayerNorm, an IDF vector), ``head.safetensors``.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from abc import abstractmethod
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar, Sequence

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from semiret import progress
from semiret.data.packaged import model_directory
from semiret.errors import SemiretError
from semiret.files import atomic_write_json, staged_directory
from semiret.models.checkpoints import ENCODER_FILE
from semiret.models.inputs import Batch, TextBatcher, check_texts
from semiret.models.sparse import SparseVectors

log = logging.getLogger(__name__)

HEAD_FILE = "head.safetensors"
DELTA_FILE = "backbone-delta.safetensors"
"""A saved encoder that records a ``base``: the backbone weights that differ from that packaged model's."""
DELTA_ROWS = ":rows"
"""Suffix of a delta's row numbers: a matrix of which few rows changed (a fine-tuned model's word embeddings: the
tokens training never saw keep theirs) is saved as those rows, under its name, and their numbers, under this."""
BATCH_SIZE = 32
SMALL_BATCH_TOKENS = 2048
"""Batches with fewer padded tokens than this run on one thread: queries gain nothing from more,
and on a busy machine a parallel region waits for its slowest thread (10x slower was measured)."""


POSITIONS_AFTER_PADDING = frozenset({"roberta", "xlm-roberta", "camembert", "longformer", "mpnet", "data2vec-text",
                                     "ibert"})
"""Model types whose position ids start after the padding id (``pad_token_id + 1``): of RoBERTa's 514 positions,
512 take tokens (a text of 514 failed with an index out of range)."""


def position_limit(config) -> int | None:
    """The longest input, in tokens, a transformers model's positions take (None: no limit it states)."""
    limit = getattr(config, "max_position_embeddings", None)
    if limit and getattr(config, "model_type", None) in POSITIONS_AFTER_PADDING:
        limit -= (getattr(config, "pad_token_id", None) or 0) + 1
    return limit


class TextEncoder(nn.Module):
    """Texts -> vectors with a transformers ``backbone``; subclasses define :meth:`_encode_batch`."""

    family: ClassVar[str]
    default_max_length: ClassVar[int] = 256

    threads: int | None = None
    """Threads for large batches (``None``: torch's setting); small batches always use one."""

    prompts: dict[str, str] = {}
    """Text put before every ``"query"`` and every ``"document"`` this encoder reads (sentence-transformers'
    prompts: E5's ``"query: "``, BGE's instruction); none unless a subclass sets them."""

    def __init__(self, backbone: nn.Module, tokenizer, name: str, max_length: int | None = None):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.name = name
        limit = position_limit(backbone.config)
        length = min(self.default_max_length, limit or 10**9) if max_length is None else max_length
        self.inputs = TextBatcher(tokenizer, length, limit, name)
        self._warned_empty = False
        self.eval()  # like transformers' from_pretrained; training code calls .train()

    @property
    def max_length(self) -> int:
        return self.inputs.max_length

    @property
    def device(self) -> torch.device:
        """Where the weights are: batches are encoded there (a GPU during training, see the trainer's hooks)."""
        return next(self.backbone.parameters()).device

    def config(self) -> dict:
        """Options that rebuild this encoder with :meth:`from_pretrained` (saved with it)."""
        return {"max_length": self.max_length}

    def describe(self) -> dict:
        """What an index records about the encoder that made it."""
        return {"family": self.family, "model": self.name, **self.config()}

    @classmethod
    @abstractmethod
    def from_pretrained(cls, model: str, **options) -> "TextEncoder":
        """Initialise from a registry name, a local model directory or a hub id."""

    # ------------------------------------------------------------------ encoding
    def encode_query(self, texts: str | Sequence[str], batch_size: int = BATCH_SIZE, show_progress: bool = False):
        """The queries' vectors, one row per text; one string gives one vector (dense: shape ``(dim,)``, as
        sentence-transformers does; sparse vectors are always rows, a string's a single one)."""
        return self._encode(texts, batch_size, "query", show_progress)

    def encode_document(self, texts: str | Sequence[str], batch_size: int = BATCH_SIZE, show_progress: bool = True):
        """The documents' vectors, shaped as :meth:`encode_query`'s."""
        return self._encode(texts, batch_size, "document", show_progress)

    def encode(self, texts: str | Sequence[str], batch_size: int = BATCH_SIZE, show_progress: bool = True):
        """sentence-transformers' ``encode``: ``texts`` read as documents (:meth:`encode_document`), the side a
        symmetric use wants (clustering, near-duplicates, passages compared with passages). A search's queries go
        through :meth:`encode_query`, which differs where a model reads the two sides apart (its prompts)."""
        return self.encode_document(texts, batch_size, show_progress)

    def similarity(self, queries, documents) -> np.ndarray:
        """Scores ``[len(queries), len(documents)]`` of vectors this encoder made (sentence-transformers'
        ``similarity``): the inner product its retrievers rank by (a cosine where the model normalises its
        vectors); one vector counts as a row of one."""
        return np.atleast_2d(queries) @ np.atleast_2d(documents).T

    def vector_values(self, vectors) -> list:
        """Vectors this encoder made as JSON values, a row each: lists of numbers (what a corpus line's or a query's
        ``vector`` field holds, :data:`semiret.data.collection.VECTOR_FIELD`)."""
        return np.atleast_2d(vectors).tolist()

    def prompted(self, texts: list[str], side: str) -> list[str]:
        """``texts`` as the encoder reads them as ``side`` (``"query"`` or ``"document"``): after its prompt for that
        side, if any (what training feeds it too, so that a model trained here reads as it is searched)."""
        prompt = self.prompts.get(side, "")
        return [prompt + text for text in texts] if prompt else texts

    def _encode(self, texts, batch_size: int, side: str, show_progress: bool):
        one_text = isinstance(texts, str)
        texts = check_texts(texts, f"{side} texts")
        filled = np.asarray([i for i, t in enumerate(texts) if t.strip()], np.int64)
        if len(filled) < len(texts) and not self._warned_empty:
            self._warned_empty = True
            log.warning("%d empty %s texts were encoded as empty vectors (this warning is shown once)",
                        len(texts) - len(filled), side)
        outputs = self._empty_outputs(len(texts))
        batches = self.inputs.batches(self.prompted([texts[i] for i in filled], side), batch_size)
        if show_progress:
            batches = progress.track(batches, f"encoding {side}s ({self.name})", total=len(filled), advance=len)
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                prepared = self._prepare()  # this call's own: threads encoding at once share no scratch
                device = self.device
                for batch in batches:
                    with torch_threads(1 if batch.input_ids.numel() < SMALL_BATCH_TOKENS else self.threads):
                        self._store(outputs, filled[batch.positions],
                                    self._encode_batch(batch.to(device), side, prepared))
        finally:
            self.train(was_training)
        encoded = self._finish(outputs)
        return self._single(encoded) if one_text else encoded

    def _single(self, encoded):
        """What one string encodes to, given the batch of its one row (kept a batch unless a subclass says)."""
        return encoded

    def _prepare(self):
        """Per-call setup before the batches (e.g. inference copies of weights, which training may change, with
        scratch buffers), handed to each :meth:`_encode_batch` of that call: an object of the call's own, as two
        threads may encode at once (a server's searches)."""
        return None

    @abstractmethod
    def _encode_batch(self, batch: Batch, side: str, prepared): ...

    @abstractmethod
    def _empty_outputs(self, n: int): ...

    @abstractmethod
    def _store(self, outputs, positions: np.ndarray, encoded) -> None: ...

    def _finish(self, outputs):
        return outputs

    # ------------------------------------------------------------------ persistence
    @property
    def tokenizer_source(self) -> str:
        """A local directory holding this encoder's tokenizer files (for a torch-free vocabulary)."""
        return self.name if Path(self.name).is_dir() else str(model_directory(self.name))

    def save(self, path: str | Path, fp16: bool = False, max_length: int | None = None, base: str | None = None) -> Path:
        """Write the encoder to a directory that :func:`semiret.models.encoders.load_encoder` reads back
        (``fp16``: weights stored in half precision; ``max_length``: the length recorded for later use,
        default the current one; ``base``: see :meth:`write`). The encoder itself is left as it was."""
        target = Path(path)
        if target.is_dir() and any(target.iterdir()) and not (target / ENCODER_FILE).is_file():
            raise SemiretError(f"{target} exists and is not a saved encoder: refusing to overwrite it")
        return save_model_directory(target, lambda staged: self.write(staged, fp16, max_length, base))

    def write(self, directory: Path, fp16: bool = False, max_length: int | None = None, base: str | None = None) -> None:
        """Write the encoder's files into an existing (staging) ``directory``. ``base``: the model this encoder was
        fine-tuned from (a registry name, so that loading finds it offline); only the backbone weights that
        differ from it are written (a model that trained two of six layers ships a third of the size), and
        loading reads the rest from the base."""
        training_length = self.inputs.max_length
        if max_length:
            self.inputs.max_length = max_length
        changed = None if base is None else self._changed_from(base, fp16)
        try:
            with _half_precision(self, fp16):
                if changed is None:
                    self.backbone.save_pretrained(directory)
                else:
                    state, delta = self.backbone.state_dict(), {}
                    for name, rows in changed.items():
                        delta[name] = (state[name] if rows is None else state[name][rows]).detach().contiguous()
                        if rows is not None:
                            delta[name + DELTA_ROWS] = rows
                    save_file(delta, str(directory / DELTA_FILE))
                self.tokenizer.save_pretrained(directory)
                head = self.own_head_state()
                if head:
                    save_file(head, str(directory / HEAD_FILE))
                base_field = {} if base is None else {"base": base}
                atomic_write_json(directory / ENCODER_FILE, {"family": self.family, **self.config(), **base_field})
        finally:
            self.inputs.max_length = training_length

    def own_head_state(self) -> dict[str, torch.Tensor]:
        """The weights of modules beside the backbone (a head trained with it), which :meth:`save` writes to
        :data:`HEAD_FILE`; those that are the backbone's own (an MLM head, tied embeddings) are saved with it."""
        in_backbone = {t.data_ptr() for t in self.backbone.state_dict().values()}
        return {k: v.detach().contiguous() for k, v in self.state_dict().items()
                if not k.startswith("backbone.") and v.data_ptr() not in in_backbone}

    def _changed_from(self, base: str, fp16: bool) -> dict[str, torch.Tensor | None]:
        """The backbone weights that differ from model ``base``'s (same architecture), compared in the precision
        they are stored in (``fp16``): each name with the numbers of its changed rows where a matrix changed in at
        most half of them (saved as those rows alone), else None (saved whole)."""
        from semiret.models.loading import load_encoder_model

        reference = load_encoder_model(base).state_dict()
        state = self.backbone.state_dict()
        if set(reference) != set(state) or any(reference[k].shape != state[k].shape for k in state):
            raise SemiretError(f"this encoder's backbone is not {base!r}'s architecture: it cannot be saved as a "
                               "difference from it")
        stored = torch.float16 if fp16 else torch.float32
        changed = {}
        for name, value in state.items():
            differs = value.to(stored) != reference[name].to(stored)
            if differs.any():
                rows = torch.nonzero(differs.any(dim=1)).flatten() if value.dim() == 2 else None
                changed[name] = rows if rows is not None and 2 * len(rows) <= len(value) else None
        return changed


def weights_fingerprint(module: nn.Module) -> str:
    """A short hash of a model's parameters: what an index records of the model that built it, so a model retrained
    or replaced at the same path is refused instead of matching queries against vectors of the old one.

    Parameters are hashed rounded to float16, the precision checkpoints are saved in: a model in memory after
    training and the same model loaded back from its fp16 checkpoint give the same fingerprint."""
    digest = hashlib.sha1()
    for parameter in module.parameters():
        digest.update(parameter.detach().to("cpu", torch.float16).contiguous().view(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()[:16]


def save_model_directory(path: str | Path, write) -> Path:
    """Stage a model directory beside ``path``, fill it with ``write(staged)`` and publish it in one rename
    (a crash leaves the old model, never a half-written one): every saved model goes through here."""
    with staged_directory(path) as staged:
        write(staged)
    return Path(path)


def copy_model_directory(source: str | Path, target: str | Path) -> Path:
    """A saved model's files copied to ``target`` through :func:`save_model_directory` (the model that was there
    stays whole until the copy is)."""
    return save_model_directory(target, lambda staged: shutil.copytree(source, staged, dirs_exist_ok=True))


@contextmanager
def _half_precision(module: nn.Module, enabled: bool):
    """Weights in float16 inside the block (checkpoints stay small), and after it exactly the float32 weights they
    were: a model saved in mid-training (the best epoch so far) goes on training unrounded."""
    if not enabled:
        yield
        return
    kept = {name: value.detach().clone() for name, value in module.state_dict().items() if value.is_floating_point()}
    module.half()
    try:
        yield
    finally:
        module.float()
        with torch.no_grad():
            for name, value in module.state_dict().items():
                if name in kept:
                    value.copy_(kept[name])


@contextmanager
def torch_threads(n: int | None):
    """Run torch operations on ``n`` threads (unchanged when ``None``)."""
    previous = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class SparseEncoder(TextEncoder):
    """Encoders whose outputs are :class:`SparseVectors` over the tokenizer's vocabulary ids."""

    @property
    def vocab_size(self) -> int:
        return self.backbone.config.vocab_size

    def _empty_outputs(self, n: int):
        empty = (np.empty(0, np.int32), np.empty(0, np.float32))
        return [empty] * n

    def _store(self, outputs, positions, encoded) -> None:
        for position, row in zip(positions.tolist(), encoded):
            outputs[position] = row

    def _finish(self, outputs) -> SparseVectors:
        return SparseVectors.from_rows(outputs, self.vocab_size)

    def vector_values(self, vectors: SparseVectors) -> list[dict[str, float]]:
        """Each row as ``{token: weight}`` over the tokenizer's tokens (Pyserini's JsonVectorCollection; what the
        ``sparse-vectors`` retriever reads), heaviest first."""
        rows = []
        for i in range(len(vectors)):
            ids, values = vectors.row(i)
            order = np.argsort(-values, kind="stable")
            tokens = self.tokenizer.convert_ids_to_tokens(ids[order].tolist())
            rows.append(dict(zip(tokens, values[order].tolist())))
        return rows

    def similarity(self, queries: SparseVectors, documents: SparseVectors) -> np.ndarray:
        """The inner products of two sets of sparse vectors, ``[len(queries), len(documents)]``."""
        return (queries.to_csr() @ documents.to_csr().T).toarray()

    @staticmethod
    def _rows_of(vectors: torch.Tensor, first_id: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
        """(ids + ``first_id``, values) of each row's nonzero entries, on the CPU: how a batch of dense [B, V]
        vectors computed off the CPU (a GPU) becomes the rows :meth:`_store` keeps."""
        rows, columns = torch.nonzero(vectors, as_tuple=True)
        values = vectors[rows, columns].float().cpu().numpy()
        ids = (columns + first_id).cpu().numpy().astype(np.int32)
        bounds = np.searchsorted(rows.cpu().numpy(), np.arange(len(vectors) + 1))
        return [(ids[a:b], values[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def save_own_weights(model: nn.Module, file: Path, loaded_prefix: str) -> None:
    """Write ``model``'s weights but those of a pretrained part saved in its own format (names starting with
    ``loaded_prefix``, and other names of the same tensors: a head that is the part's tied word embeddings) to
    ``file``, as they are now (inside :func:`_half_precision` for float16): what :func:`load_own_weights` reads
    back."""
    shared = _shared_with(model, loaded_prefix)
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items() if k not in shared}, str(file))


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors; one missing, cut short or corrupt is an error naming it (it was a traceback)."""
    try:
        return load_file(str(path))
    except (OSError, SafetensorError) as exc:
        raise SemiretError(f"cannot read the weights in {path}: {exc} (copy the model folder again)") from None


def load_own_weights(model: nn.Module, file: Path, loaded_prefix: str, marker: str) -> nn.Module:
    """Load ``file`` (the weights a model saves beside a pretrained part already loaded, whose parameters start
    with ``loaded_prefix``) into ``model`` in float32, in evaluation mode; an error naming ``marker`` when the
    file and the model do not match."""
    state = {k: v.float() for k, v in read_weights(file).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    shared = _shared_with(model, loaded_prefix)
    missing = [k for k in missing if k not in shared]
    if unexpected or missing:
        raise SemiretError(f"{file} does not match {marker}: missing {missing}, unexpected {unexpected}")
    return model.eval()


def _shared_with(model: nn.Module, prefix: str) -> set[str]:
    """Names in ``model``'s weights of the tensors held under ``prefix`` (those names, and any other name of the
    same tensor)."""
    state = model.state_dict()
    held = {v.data_ptr() for k, v in state.items() if k.startswith(prefix) and v.numel()}
    return {k for k, v in state.items() if k.startswith(prefix) or (v.numel() and v.data_ptr() in held)}


def average_weights(model: nn.Module, other: nn.Module, share: float) -> nn.Module:
    """``model``'s floating-point weights become ``(1 - share) * model + share * other`` in place (WiSE-FT:
    averaging a fine-tuned model with the one it started from keeps more of the start's robustness on data
    unlike the fine-tuning's). The two must have the same architecture."""
    if not 0.0 <= share <= 1.0:
        raise SemiretError(f"the averaging share must be between 0 and 1, got {share}")
    return _combine_weights(model, other, 1.0 - share, share)


def undo_averaging(model: nn.Module, other: nn.Module, share: float) -> nn.Module:
    """The inverse of :func:`average_weights` with the same ``other`` and ``share``: ``model``'s weights become
    ``(model - share * other) / (1 - share)`` in place, the fine-tuned model before it was averaged (up to the
    rounding of a float16 checkpoint, magnified by ``1 / (1 - share)``)."""
    if not 0.0 <= share < 1.0:
        raise SemiretError(f"an averaging share to undo must be at least 0 and below 1, got {share}")
    return _combine_weights(model, other, 1.0 / (1.0 - share), -share / (1.0 - share))


def _combine_weights(model: nn.Module, other: nn.Module, own: float, theirs_share: float) -> nn.Module:
    """``model``'s floating-point weights become ``own * model + theirs_share * other`` in place."""
    theirs = other.state_dict()
    if theirs.keys() != model.state_dict().keys():
        raise SemiretError("weights can only be averaged between models of the same architecture")
    done = set()  # tied weights (embeddings and output projection) appear under two names: combine them once
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point() and tensor.data_ptr() not in done:
                done.add(tensor.data_ptr())
                tensor.mul_(own).add_(theirs[name].to(tensor.dtype), alpha=theirs_share)
    return model
