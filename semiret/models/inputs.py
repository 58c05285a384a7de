"""Model inputs: checked texts, truncation to the model's limit (reported once), length-sorted batches."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from semiret.errors import SemiretError

log = logging.getLogger(__name__)


def check_texts(texts: str | Sequence[str], what: str = "texts") -> list[str]:
    """A list of strings (one string is a list of one); anything else is a clear error."""
    if isinstance(texts, str):
        return [texts]
    if texts is None:
        raise SemiretError(f"{what}: expected a string or a list of strings, got None")
    texts = list(texts)
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise SemiretError(f"{what}: item {bad} is a {type(texts[bad]).__name__}, not a string")
    return texts


@dataclass
class Batch:
    """Texts ``positions`` (indices into the encoded list) as padded id tensors, longest first."""

    positions: np.ndarray
    input_ids: torch.Tensor  # int64 [b, length]
    attention_mask: torch.Tensor  # int64 [b, length]

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def lengths(self) -> list[int]:
        return self.attention_mask.sum(dim=1).tolist()

    def to(self, device: torch.device) -> "Batch":
        """The same batch with its tensors on ``device`` (itself when they are there already)."""
        if self.input_ids.device == device:
            return self
        return Batch(self.positions, self.input_ids.to(device), self.attention_mask.to(device))


class TextBatcher:
    """Tokenize with a model's fast tokenizer, truncating to ``max_length`` (one warning per batcher).

    Texts are sorted by length before batching, so padding is small and results come back in input
    order through :attr:`Batch.positions`.
    """

    def __init__(self, tokenizer, max_length: int, limit: int | None, model_name: str):
        self.limit = limit
        self.model_name = model_name
        self.pad_id = tokenizer.pad_token_id or 0
        self._tokenizer = tokenizer.backend_tokenizer.__class__.from_str(tokenizer.backend_tokenizer.to_str())
        self._tokenizer.no_padding()
        self.max_length = max_length
        self._warned = False

    @property
    def max_length(self) -> int:
        return self._max_length

    @max_length.setter
    def max_length(self, value: int) -> None:
        if value < 2:
            raise SemiretError(f"max_length must be at least 2 tokens, got {value}")
        if self.limit and value > self.limit:
            log.warning("max_length %d exceeds what %s accepts: using its limit, %d tokens", value, self.model_name,
                        self.limit)
            value = self.limit
        self._max_length = value
        self._tokenizer.enable_truncation(value)

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids with the model's special tokens, truncated to ``max_length``."""
        encodings = self._tokenizer.encode_batch_fast(texts)
        truncated = sum(1 for e in encodings if e.overflowing)
        if truncated and not self._warned:
            self._warned = True
            log.warning("%d of a batch's %d texts are longer than the %d tokens %s reads: their first %d are encoded, "
                        "as the model was trained (a retriever's or a training recipe's max-length option sets another "
                        "limit; said once, of the first batch holding such texts)", truncated, len(texts),
                        self.max_length, self.model_name, self.max_length)
        return [e.ids for e in encodings]

    def padded(self, texts: list[str], device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(input ids, attention mask) of all ``texts`` as one padded batch, rows in input order, on ``device``
        (default the CPU): what a training step feeds its encoder, whose outputs must line up with the batch's
        examples."""
        batch = next(self.batches(texts, len(texts)))
        order = np.argsort(batch.positions)
        return batch.input_ids[order].to(device), batch.attention_mask[order].to(device)

    def batches(self, texts: list[str], batch_size: int) -> Iterator[Batch]:
        if batch_size < 1:
            raise SemiretError(f"batch size must be at least 1, got {batch_size}")
        ids = self.tokenize(texts)
        order = np.argsort([-len(i) for i in ids], kind="stable")
        for start in range(0, len(order), batch_size):
            positions = order[start: start + batch_size]
            width = len(ids[positions[0]])
            input_ids = torch.full((len(positions), width), self.pad_id, dtype=torch.long)
            attention_mask = torch.zeros((len(positions), width), dtype=torch.long)
            for row, position in enumerate(positions):
                n = len(ids[position])
                input_ids[row, :n] = torch.tensor(ids[position])
                attention_mask[row, :n] = 1
            yield Batch(positions, input_ids, attention_mask)

