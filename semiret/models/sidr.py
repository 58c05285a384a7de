"""The SiDR model (Zhou et al., ICLR 2025): VDR encoders for queries and documents, separate or shared.

A saved SiDR model is a directory with ``sidr.json`` and one saved encoder per side (``query/``,
``document/``; one ``encoder/`` when shared), weights in fp16 safetensors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from semiret.models.base import save_model_directory
from semiret.models.checkpoints import SIDR
from semiret.types import SparseQuery


class SiDRModel(torch.nn.Module):
    """Query and document VDR encoders (the same module when ``shared``)."""

    def __init__(self, query_encoder, document_encoder=None):
        super().__init__()
        self.query_encoder = query_encoder
        self.document_encoder = document_encoder if document_encoder is not None else query_encoder

    @property
    def shared(self) -> bool:
        return self.document_encoder is self.query_encoder

    @classmethod
    def initialise(cls, base: str = "splade-tiny", shared: bool = False, head: str = "mlm", top_k: int = 768,
                   query_max_length: int = 64, document_max_length: int = 256) -> "SiDRModel":
        """Untrained SiDR from a pretrained masked LM (its encoder and tied embeddings)."""
        from semiret.models.vdr import VDREncoder

        query = VDREncoder.from_pretrained(base, max_length=query_max_length, top_k=top_k, head=head)
        if shared:
            query.inputs.max_length = max(query_max_length, document_max_length)
            return cls(query)
        return cls(query, VDREncoder.from_pretrained(base, max_length=document_max_length, top_k=top_k, head=head))

    @classmethod
    def load(cls, name_or_path: str) -> "SiDRModel":
        """A saved SiDR directory, the packaged ``sidr-scifact``, or any MLM as an untrained shared VDR."""
        from semiret.models.encoders import load_encoder

        if SIDR.directory(name_or_path) is None:
            return cls.initialise(name_or_path, shared=True)
        path, meta = SIDR.read(name_or_path)
        if meta["shared"]:
            return cls(load_encoder(str(path / "encoder"), "vdr"))
        return cls(load_encoder(str(path / "query"), "vdr"), load_encoder(str(path / "document"), "vdr"))

    def reshape(self, top_k: int | None = None, query_max_length: int | None = None,
                document_max_length: int | None = None) -> None:
        """Keep ``top_k`` dimensions per vector and read this many tokens per side from now on (None: unchanged);
        a shared encoder reads the longer of the two lengths given, as :meth:`initialise` makes it."""
        if top_k is not None:
            for encoder in {self.query_encoder, self.document_encoder}:
                encoder.top_k = top_k
        lengths = [n for n in (query_max_length, document_max_length) if n is not None]
        if self.shared:
            if lengths:
                self.query_encoder.inputs.max_length = max(lengths)
            return
        if query_max_length is not None:
            self.query_encoder.inputs.max_length = query_max_length
        if document_max_length is not None:
            self.document_encoder.inputs.max_length = document_max_length

    def save(self, path: str | Path, training: dict | None = None, fp16: bool = True) -> Path:
        def write(staged: Path) -> None:
            sides = {"encoder": self.query_encoder} if self.shared else {
                "query": self.query_encoder, "document": self.document_encoder}
            for name, encoder in sides.items():
                (staged / name).mkdir()
                encoder.write(staged / name, fp16=fp16)
            SIDR.write_marker(staged, shared=self.shared, training=training or {})

        return save_model_directory(path, write)

    def describe(self) -> str:
        return f"sidr({self.query_encoder.name})"


def sparse_queries(encoder, vectors: torch.Tensor) -> list[SparseQuery]:
    """Top-k sparsified VDR vectors (shifted space) as index queries over tokenizer ids."""
    sparse = encoder.sparsify(vectors.detach()).cpu()
    queries = []
    for row in sparse:
        ids = torch.nonzero(row).squeeze(1)
        queries.append(SparseQuery((ids + encoder.first_id).numpy().astype(np.int32), row[ids].numpy()))
    return queries
