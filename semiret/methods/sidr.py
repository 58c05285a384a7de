"""SiDR (Zhou et al., ICLR 2025): semi-parametric retrieval over a binary bag-of-tokens index.

This module composes shared pieces into the paper's recipe:

- the model: :class:`~semiret.models.sidr.SiDRModel`, VDR encoders for queries and documents, separate or shared;
- the three pipelines (:mod:`semiret.search.semiparametric`): ``sidr-full``, ``sidr-beta``, ``sidr-beta-rerank``;
- training: the semi-parametric contrastive loss (:func:`semiret.training.losses.sidr_loss`), in-training
  hard negatives from the fixed bag-of-tokens index (:class:`semiret.training.miners.RetrievedNegativeMiner`),
  the shared :class:`semiret.training.trainer.Trainer`.

The model and its saved form are :class:`semiret.models.sidr.SiDRModel`.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from semiret.data.collection import Collection
from semiret.errors import SemiretError
from semiret.models.sidr import SiDRModel, sparse_queries

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- training
@dataclass
class SiDRTrainingConfig:
    data: str
    output: str
    split: str = "train"
    base: str = "splade-tiny"
    shared: bool = False
    head: str = "mlm"
    top_k: int = 768
    query_max_length: int = 64
    document_max_length: int = 256
    loss_form: str = "paper"
    semi_parametric: bool = True
    negatives: str = "retrieved"  # retrieved | none
    pool_size: int = 20
    retrieve_depth: int = 100
    epochs: int = 15
    batch_size: int = 32
    learning_rate: float = 2e-4
    warmup_epochs: float = 1.0
    max_grad_norm: float = 2.0
    seed: int = 12345
    threads: int | None = None
    extra: dict = field(default_factory=dict)

    def validate(self) -> None:
        if self.loss_form not in ("paper", "code"):
            raise SemiretError(f"loss form must be 'paper' or 'code', not {self.loss_form!r}")
        if self.negatives not in ("retrieved", "none"):
            raise SemiretError(f"negatives must be 'retrieved' or 'none', not {self.negatives!r}")
        if self.epochs < 1 or self.batch_size < 2:
            raise SemiretError("training needs at least 1 epoch and batches of at least 2 pairs")


def train_sidr(config: SiDRTrainingConfig, resume: bool = True) -> dict:
    """Train SiDR on a BEIR collection's qrels split; writes ``<output>/model`` and returns a summary."""
    from semiret.search.retrievers import BagOfTokensRetriever
    from semiret.training.data import TrainingSet
    from semiret.training.losses import sidr_loss
    from semiret.training.miners import RetrievedNegativeMiner
    from semiret.training.trainer import Trainer, TrainingConfig

    config.validate()
    output = Path(config.output)
    collection = Collection(config.data)
    training_set = TrainingSet.from_collection(collection, config.split)  # validates ids before any compute
    model = SiDRModel.initialise(config.base, config.shared, config.head, config.top_k,
                                 config.query_max_length, config.document_max_length)
    query_encoder, document_encoder = model.query_encoder, model.document_encoder

    miner = None
    if config.negatives == "retrieved":
        bot_path = output / "bot-index"
        if not (bot_path / "meta.json").is_file():
            BagOfTokensRetriever.build(collection.corpus(), bot_path, overwrite=True, store_texts=False,
                                       tokenizer=config.base, max_length=config.document_max_length)
        miner = RetrievedNegativeMiner(BagOfTokensRetriever.open(bot_path).index, training_set.documents,
                                       training_set.positives, pool_size=config.pool_size,
                                       depth=config.retrieve_depth, seed=config.seed)

    def tokens(encoder, texts):
        batch = next(encoder.inputs.batches(texts, len(texts)))
        order = np.argsort(batch.positions)  # back to input order
        return batch.input_ids[order], batch.attention_mask[order]

    def step(pairs, global_step):
        # the paper's form uses only top-k vectors: the encoders compute gradients for kept entries only
        dense = config.loss_form == "code"
        q_ids, q_mask = tokens(query_encoder, [p.query for p in pairs])
        q = query_encoder(q_ids, q_mask, sparse=not dense)
        q_sparse = query_encoder.sparsify(q) if dense else q
        documents = [p.positive for p in pairs]
        if miner is not None:
            mined = miner.mine([p.query_id for p in pairs], sparse_queries(query_encoder, q_sparse))
            documents += [d for negatives in mined for d in negatives]
        documents += [n for p in pairs for n in p.negatives]
        d_ids, d_mask = tokens(document_encoder, [d.full_text for d in documents])
        p = document_encoder(d_ids, d_mask, sparse=not dense)
        p_sparse = document_encoder.sparsify(p) if dense else p
        q_bot = query_encoder.bag_of_tokens(q_ids, q_mask)
        p_bot = document_encoder.bag_of_tokens(d_ids, d_mask)
        loss = sidr_loss(q, p, q_bot, p_bot, q_sparse, p_sparse, form=config.loss_form,
                         semi_parametric=config.semi_parametric)
        return loss, {}

    trainer_config = TrainingConfig(epochs=config.epochs, batch_size=config.batch_size,
                                    learning_rate=config.learning_rate, warmup_epochs=config.warmup_epochs,
                                    max_grad_norm=config.max_grad_norm, seed=config.seed, threads=config.threads)
    steps_per_epoch = len(training_set.batches(config.batch_size, __import__("random").Random(0)))
    trainer = Trainer(model, lambda epoch, rng: training_set.batches(config.batch_size, rng), step,
                      trainer_config, output, steps_per_epoch)
    started = time.perf_counter()
    history = trainer.train(resume=resume)
    seconds = time.perf_counter() - started
    summary = {"config": asdict(config), "pairs": len(training_set), "steps_per_epoch": steps_per_epoch,
               "train_seconds": round(seconds, 1),
               "seconds_per_epoch": round(float(np.mean([h.seconds for h in history])), 1) if history else None,
               "loss_per_epoch": [round(h.mean_loss, 4) for h in history]}
    model.save(output / "model", training=summary)
    (output / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
