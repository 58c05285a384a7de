"""SiDR (Zhou et al., ICLR 2025): semi-parametric retrieval over a binary bag-of-tokens index.

This module composes shared pieces into the paper's recipe:

- the model: :class:`~semiret.models.sidr.SiDRModel`, VDR encoders for queries and documents, separate or shared;
- the three pipelines (:mod:`semiret.search.semiparametric`): ``sidr-full``, ``sidr-beta``, ``sidr-beta-rerank``;
- training: :class:`semiret.training.contrastive.SemiParametricLoss`, the semi-parametric contrastive loss
  with in-training hard negatives from the fixed bag-of-tokens index
  (:class:`semiret.training.miners.RetrievedNegativeMiner`), with the shared
  :class:`semiret.training.trainer.Trainer`.

The model and its saved form are :class:`semiret.models.sidr.SiDRModel`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from semiret.errors import SemiretError
from semiret.training.config import InBatchTeachers, TrainingConfig, WeightAveraging


# ---------------------------------------------------------------------------------------------- training
INITIAL_SHAPE = {"shared": False, "head": "mlm", "top_k": 768, "query_max_length": 64, "document_max_length": 256}
"""What a SiDR model made from a masked LM has unless the run says otherwise (the paper's top-k and lengths)."""


@dataclass
class SiDRTrainingConfig(InBatchTeachers, WeightAveraging, TrainingConfig):
    output: str = "runs/sidr"
    """Run folder: checkpoints, bag-of-tokens index, final model."""
    shared: bool | None = None
    """One encoder for queries and documents (default: separate ones; a saved SiDR --base keeps its own)."""
    head: str | None = None
    """'mlm': the pretrained MLM head; 'fresh': the authors' LayerNorm + tied embeddings (default: mlm; a saved
    SiDR --base keeps its own)."""
    top_k: int | None = None
    """Dimensions kept per vector (default: 768; a saved SiDR --base: its own)."""
    query_max_length: int | None = None
    """Query tokens read in training, longer queries are cut (default: 64; a saved SiDR --base: its own)."""
    document_max_length: int | None = None
    """Document tokens read in training and by the bag-of-tokens index (default: 256; a saved SiDR --base: its
    own)."""
    loss_form: str = "paper"
    """'paper' (L_para + L_semi-para) or 'code' (the authors' 4-term loss)."""
    semi_parametric: bool = True
    """Keep the semi-parametric loss terms (off: the ablation)."""
    negatives: str = "retrieved"
    """'retrieved' (in-training beta search) or 'none' (in-batch only)."""
    pool_size: int = 20
    """Negative pool size m per query."""
    retrieve_depth: int = 100
    """Results of the in-training search scanned for the pool."""
    epochs: int = 15
    learning_rate: float = 2e-4
    """Peak learning rate of AdamW."""
    warmup_epochs: float = 1.0
    """Epochs of linear learning-rate warm-up (then linear decay to 0)."""

    def validate(self) -> None:
        if self.loss_form not in ("paper", "code"):
            raise SemiretError(f"loss form must be 'paper' or 'code', not {self.loss_form!r}")
        if self.negatives not in ("retrieved", "none"):
            raise SemiretError(f"negatives must be 'retrieved' or 'none', not {self.negatives!r}")
        if self.epochs < 1 or self.batch_size < 2:
            raise SemiretError("training needs at least 1 epoch and batches of at least 2 pairs")
        if self.negatives == "retrieved" and (self.pool_size < 1 or self.retrieve_depth < 1):
            raise SemiretError(f"retrieved negatives need --pool-size and --retrieve-depth of at least 1 (got "
                               f"{self.pool_size} and {self.retrieve_depth}); --negatives none trains without them")
        if self.top_k is not None and self.top_k < 1:
            raise SemiretError(f"--top-k must be at least 1, got {self.top_k}")
        self.validate_teachers()
        self.validate_averaging()


def train_sidr(config: SiDRTrainingConfig, resume: bool = True) -> dict:
    """Train SiDR on a BEIR collection's qrels split, from ``config.base`` (a masked LM, or a saved SiDR model to
    train further); writes ``<output>/model`` and returns a summary."""
    from semiret.data.collection import Collection
    from semiret.models.checkpoints import SIDR
    from semiret.models.sidr import SiDRModel
    from semiret.search import BagOfTokensRetriever
    from semiret.training.config import Schedule
    from semiret.training.contrastive import SemiParametricLoss
    from semiret.training.data import PairBatches, TrainingSet
    from semiret.training.distillation import InBatchDistillation
    from semiret.training.distributed import is_main_process, main_process_first
    from semiret.training.miners import RetrievedNegativeMiner
    from semiret.training.trainer import Trainer, epoch_summary, saved_history, write_run_summary

    config.validate()
    config = config.resolved()
    output = Path(config.output)
    collection = Collection(config.data)
    training_set = TrainingSet.from_collection(collection, config.split)  # validates ids before any compute
    saved_start = SIDR.directory(config.base)

    def starting_model() -> SiDRModel:
        return starting_sidr_model(config.base, config.shared, config.head, config.top_k, config.query_max_length,
                                   config.document_max_length)

    model = starting_model()

    miner = None
    if config.negatives == "retrieved":
        bot_path = output / "bot-index"
        # a new run (or one started again) builds it afresh: an older run's may hold another corpus, tokenizer or
        # length; a resumed run keeps the one it mined with
        kept = resume and bool(saved_history(output)) and (bot_path / "meta.json").is_file()
        with main_process_first():  # the others open what it built
            if is_main_process() and not kept:
                tokenizer = model.document_encoder.name if saved_start is not None else config.base
                BagOfTokensRetriever.build(collection.corpus(), bot_path, overwrite=True, store_texts=False,
                                           tokenizer=tokenizer, max_length=model.document_encoder.max_length)
        miner = RetrievedNegativeMiner(BagOfTokensRetriever.open(bot_path).index, training_set.documents,
                                       training_set.positives, pool_size=config.pool_size,
                                       depth=config.retrieve_depth)
    distillation = InBatchDistillation.of_config(config, training_set) if config.teachers else None
    batches = PairBatches(training_set, config.batch_size)
    loss = SemiParametricLoss(config.loss_form, config.semi_parametric, miner, distillation)
    schedule = Schedule(config.epochs, config.learning_rate, config.warmup_epochs)
    started = time.perf_counter()
    history = Trainer(model, loss, batches, config, schedule, output).train(resume=resume)
    seconds = time.perf_counter() - started
    summary = {"config": asdict(config), "pairs": len(training_set), "steps_per_epoch": len(batches),
               "train_seconds": round(seconds, 1),
               "seconds_per_epoch": round(sum(h.seconds for h in history) / len(history), 1) if history else None,
               **epoch_summary(history)}
    if config.average_with_base:
        from semiret.models.base import average_weights

        average_weights(model.float(), starting_model(), config.average_with_base)
        summary["averaged_with_base"] = config.average_with_base
    if is_main_process():
        model.save(output / "model", training=summary)
        summary = write_run_summary(output, summary)
    return summary


def starting_sidr_model(base: str, shared: bool | None = None, head: str | None = None, top_k: int | None = None,
                        query_max_length: int | None = None, document_max_length: int | None = None):
    """A SiDR run's ``--base`` as it starts: a masked LM made an untrained VDR with this head, top-k and lengths
    (None: :data:`INITIAL_SHAPE`'s), or a saved SiDR model trained further (what ``semiret adapt`` does) with the
    top-k and lengths given (None: its own); its sharing and head are what it was trained with, and asking for
    others is an error rather than silently ignored."""
    from semiret.models.checkpoints import SIDR
    from semiret.models.sidr import SiDRModel

    saved_start = SIDR.directory(base)
    if saved_start is None:
        given = {"shared": shared, "head": head, "top_k": top_k, "query_max_length": query_max_length,
                 "document_max_length": document_max_length}
        return SiDRModel.initialise(base, **{**INITIAL_SHAPE, **{k: v for k, v in given.items() if v is not None}})
    model = SiDRModel.load(str(saved_start))
    saved = {"shared": model.shared, "head": model.query_encoder.head}
    conflicts = [f"--{'shared' if value else 'no-shared'}" if name == "shared" else f"--{name} {value}"
                 for name, value in (("shared", shared), ("head", head)) if value is not None and value != saved[name]]
    if conflicts:
        raise SemiretError(f"--base {base} is a trained SiDR model (shared: {saved['shared']}, head: "
                           f"{saved['head']}); it cannot be trained further with {' and '.join(conflicts)} (leave "
                           f"them out, or start from a masked LM)")
    model.reshape(top_k, query_max_length, document_max_length)
    return model
