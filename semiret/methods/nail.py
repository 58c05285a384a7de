"""NAIL (Soares et al., "NAIL: Lexical Retrieval Indices with Efficient Non-Autoregressive Decoders", EMNLP
2023), composed from shared pieces:

- the model: :class:`~semiret.models.nail.NailModel`, an encoder from the registry and a non-autoregressive
  decoder scoring the whole vocabulary; queries are only tokenized. ``--architecture decoder-only`` trains the
  decoder-only variant instead (:class:`~semiret.models.nail.NailDecoderOnlyModel`: a causal LM, by default
  ``smollm2-135m``, reads the document then ``positions`` placeholders; only its last ``trainable_layers``
  layers, final norm, LM head and the placeholders' vectors train), with shorter documents and fewer epochs by
  default (:data:`ARCHITECTURE_DEFAULTS`) to fit a 2-core CPU in well under an hour;
- its retrievers (:mod:`semiret.search.nail`): ``bm25+nail``, ``nail-exh``, ``nail-sparse``;
- training, two stages with the shared resumable :class:`~semiret.training.trainer.Trainer` and the paper's
  loss (:class:`~semiret.training.contrastive.TokenSetContrastiveLoss`, Eq. 3, in-batch softmax, summed):

  1. self-supervised pre-training on the unlabelled corpora: (pseudo-query, pseudo-passage) pairs, half
     inverse cloze with the span removed, half independent cropping
     (:func:`~semiret.training.pseudo_queries.generate_pseudo_pairs`), in-batch negatives only;
  2. fine-tuning on the qrels: each query's positive, ``hard_negatives`` documents drawn per batch from BM25's
     top ``negative_depth`` (positives excluded; :class:`~semiret.training.miners.PooledNegatives`), and every
     other passage of the batch.

Each stage checkpoints to ``<output>/<stage>/`` after every epoch and resumes from there; the pre-trained
model is saved to ``<output>/pretrain/model`` (a finished stage is not run again), the final one (fp16) to
``<output>/model``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from semiret.errors import SemiretError
from semiret.models.checkpoints import NAIL
from semiret.training.config import InBatchTeachers, Pretraining, TrainingConfig, WeightAveraging

log = logging.getLogger(__name__)


ARCHITECTURE_DEFAULTS = {
    "encoder-decoder": {"base": "splade-tiny", "max_length": 256, "pretrain_epochs": 4, "finetune_epochs": 8},
    "decoder-only": {"base": "smollm2-135m", "max_length": 128, "pretrain_epochs": 1, "finetune_epochs": 3},
}
"""The defaults of the options left unset, per architecture. SmolLM2-135M reads 128 document tokens and 16
placeholders in about 0.12 s of one core per passage in training (bfloat16 on an AMX Xeon, 2 layers trained): a
64-passage step takes about 8 s, against 2 s for the encoder-decoder on splade-tiny at 256 tokens."""


@dataclass
class NailTrainingConfig(Pretraining, InBatchTeachers, WeightAveraging, TrainingConfig):
    output: str = "runs/nail"
    """Run folder: checkpoints, the pre-trained and the final model, summary.json."""
    architecture: str = "encoder-decoder"
    """encoder-decoder (an MLM encoder and a non-autoregressive decoder) or decoder-only (a causal LM reads the
    document, then the placeholders)."""
    base: str | None = None
    """Model to start from: a masked LM (encoder-decoder; default splade-tiny), a Llama-style causal LM
    (decoder-only; default smollm2-135m), or a saved NAIL model (nail-scifact, a folder) to train further, whose
    own architecture is kept (the architecture options are then ignored)."""
    positions: int = 16
    """Decoder positions P (learned position embeddings, the decoder's only inputs); decoder-only: the
    placeholder positions after the document."""
    trainable_layers: int = 2
    """Decoder-only: the LM's last layers trained, with its final norm, head and the placeholders' vectors (the
    rest is frozen; tied embeddings are untied, the input ones frozen)."""
    placeholder: str | None = None
    """Decoder-only: the token at the placeholder positions (default: the tokenizer's end-of-sequence token)."""
    precision: str = "auto"
    """Decoder-only: the LM's arithmetic, float32, bfloat16 (autocast) or auto (bfloat16 where the CPU has it)."""
    decoder_layers: int = 2
    """Transformer decoder layers."""
    score: str = "log1p-relu"
    """Token score: log1p-relu, logits or log-softmax."""
    attention: str = "full"
    """Decoder self-attention over positions: full or causal."""
    max_length: int | None = None
    """Document tokens the model reads in training and indexing (default: 256; decoder-only 128)."""
    residual: bool = True
    """Start from the encoder's own MLM scores: the decoder's (zero-initialised) scores are added to the encoder's
    max-pooled MLM logits (beyond the paper; --no-residual: the paper's decoder-only scores). Encoder-decoder
    only: the decoder-only variant has none."""
    encoder_learning_rate: float | None = 5e-5
    """Peak learning rate of the pretrained encoder and its MLM head in both stages (the decoder trains at the
    stage's rate); none: the stage's rate for every parameter."""
    temperature: float = 1.0
    """Softmax temperature of the loss (the paper: 1)."""
    pretrain_pairs_per_document: int = 1
    """Pseudo pairs cut from each pre-training document."""
    pretrain_pairs_per_epoch: int | None = 2048
    """Pairs drawn per pre-training epoch (a fresh sample each epoch; none: all)."""
    pretrain_batch_size: int = 64
    """Pairs per pre-training step (each the others' negatives)."""
    pretrain_epochs: int | None = None
    """Pre-training epochs (default: 4; decoder-only 1)."""
    pretrain_learning_rate: float = 5e-4
    batch_size: int = 16
    """Queries per fine-tuning step (each with its positive and hard negatives)."""
    hard_negatives: int = 3
    """BM25 hard negatives per query in fine-tuning (the paper's default: 3)."""
    negative_depth: int = 100
    """BM25 results whose non-positives form each query's hard-negative pool."""
    finetune_epochs: int | None = None
    """Fine-tuning epochs (default: 8; decoder-only 3)."""
    finetune_learning_rate: float = 2e-4
    warmup_epochs: float = 0.1
    """Epochs of linear learning-rate warm-up in each stage (then linear decay to 0)."""

    def __post_init__(self) -> None:
        for name, value in ARCHITECTURE_DEFAULTS.get(self.architecture, {}).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        super().__post_init__()

    def model_config(self):
        from semiret.models.nail import NailConfig

        decoder_only = self.architecture == "decoder-only"
        return NailConfig(self.positions, self.decoder_layers, self.score, self.attention, self.max_length,
                          self.residual and not decoder_only, self.architecture, self.trainable_layers,
                          self.placeholder, self.precision)

    def validate(self) -> None:
        self.model_config().validate()
        self.validate_teachers()
        self.validate_averaging()
        if self.batch_size < 1 or self.pretrain_batch_size < 2:
            raise SemiretError("fine-tuning needs batches of at least 1 query, pre-training of at least 2 pairs")
        if self.hard_negatives < 0 or self.negative_depth < 1:
            raise SemiretError("hard_negatives must be >= 0 and negative_depth >= 1")
        if not self.temperature > 0:
            raise SemiretError(f"the temperature must be positive, got {self.temperature}")
        self.validate_stages()

    def resolved(self) -> "NailTrainingConfig":
        resolved = super().resolved()
        resolved.resolve_pretraining()
        return resolved


def pretraining_pairs(corpora: list[str], per_document: int, seed: int):
    """A :class:`~semiret.training.data.TrainingSet` of pseudo pairs from every corpus (a passage is a document
    of its own, so no pair's positive is another's), each passage its query's one positive (what teachers score)."""
    from semiret.data.collection import Collection, Document
    from semiret.training.data import TrainingPair, TrainingSet
    from semiret.training.pseudo_queries import generate_pseudo_pairs

    pairs = []
    for number, corpus in enumerate(corpora):
        for pair in generate_pseudo_pairs(Collection(corpus).corpus(), per_document, seed + number, prefix=f"pp{number}"):
            pairs.append(TrainingPair(pair.id, pair.query, Document(f"{pair.id}-passage", pair.passage)))
    if not pairs:
        raise SemiretError(f"no document of {', '.join(corpora)} is long enough for a pseudo pair")
    return TrainingSet(pairs, {p.query_id: {p.positive.id} for p in pairs}, {p.positive.id: p.positive for p in pairs})


def bm25_pools(training_set, depth: int) -> dict[str, list[str]]:
    """Each training query's BM25 top ``depth`` over the training corpus, judged positives left out."""
    from semiret.training.miners import negative_pool
    from semiret.training.teachers import BM25Teacher, TeacherScores

    documents = list(training_set.documents.values())
    queries = {p.query_id: p.query for p in training_set.pairs}
    top = TeacherScores(BM25Teacher(), documents, list(queries), list(queries.values())).top(depth)
    return {q: negative_pool([[documents[row].id for row in ranked]], training_set.positives.get(q, set()))
            for q, ranked in zip(queries, top.tolist())}


FINE_TUNING_OPTIONS = ("data", "split", "batch_size", "hard_negatives", "negative_depth", "average_with_base")
"""Options only fine-tuning reads (with the ``finetune_*`` ones; pre-training reads ``pretrain_corpora``, compared on
their own): a finished pre-training serves a run changing them."""


def _train_stage(model, name: str, batches, loss, config: NailTrainingConfig, epochs: int, learning_rate: float,
                 resume: bool) -> dict:
    from semiret.training.config import Schedule
    from semiret.training.trainer import train_stage

    rates = {"lm.": config.encoder_learning_rate} if config.encoder_learning_rate else None
    schedule = Schedule(epochs, learning_rate, config.warmup_epochs)
    return {"stage": name, **train_stage(model, loss, batches, config, schedule, Path(config.output) / name, rates,
                                         resume)}


def starting_model(config: NailTrainingConfig):
    """(model, config): a fresh decoder on ``config.base``, or the saved NAIL model it names, with the run's
    architecture options set to that model's (what the summary then records)."""
    from semiret.models.nail import NailModel

    saved = NAIL.directory(config.base) if config.base else None
    if saved is None:
        return NailModel.initialise(config.base, config.model_config()), config
    model = NailModel.load(str(saved))
    return model, replace(config, **asdict(model.config))


def train_nail(config: NailTrainingConfig, resume: bool = True) -> dict:
    """Pre-train on pseudo pairs of the pre-training corpora (if any), then fine-tune on ``data``'s qrels with
    BM25 hard negatives; writes ``<output>/model`` and ``summary.json`` and returns the summary."""
    import torch

    from semiret.data.collection import Collection
    from semiret.models.nail import NailModel
    from semiret.text.wordpiece import WordPieceVocabulary
    from semiret.training.contrastive import TokenSetContrastiveLoss
    from semiret.training.data import PairBatches, TrainingSet
    from semiret.training.distillation import InBatchDistillation
    from semiret.training.distributed import is_main_process
    from semiret.training.miners import PooledNegatives
    from semiret.training.trainer import check_reused_stage, start_afresh, write_run_summary

    started = time.perf_counter()
    config.validate()
    config = config.resolved()
    output = Path(config.output)
    # bad data fails here, before any model loads
    training_set = TrainingSet.from_collection(Collection(config.data), config.split) if config.finetune_epochs else None
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    model, config = starting_model(config)
    vocabulary = WordPieceVocabulary(model.tokenizer_source)
    summary: dict = {"config": asdict(config), "stages": [], "parameters": {
        "total": sum(p.numel() for p in model.parameters()),
        "trained": sum(p.numel() for p in model.parameters() if p.requires_grad)}}

    def distilling(stage_set):
        return InBatchDistillation.of_config(config, stage_set) if config.teachers else None

    pretrained = output / "pretrain" / "model"
    if not resume:
        start_afresh(output, ("pretrain", "finetune"))
    if config.pretrain_corpora and config.pretrain_epochs:
        if resume and (pretrained / NAIL.marker).is_file() and \
                check_reused_stage(output / "pretrain", config, config.pretrain_epochs, FINE_TUNING_OPTIONS):
            log.warning("pre-training already done: loading %s", pretrained)
            loaded = NailModel.load(str(pretrained))
            if loaded.config != model.config:
                raise SemiretError(f"the pre-training in {output / 'pretrain'} made a model of another shape "
                                   f"({asdict(loaded.config)}): resume with the options it was made with, or start "
                                   "again with --no-resume")
            model = loaded
            summary["stages"].append(json.loads((pretrained / NAIL.marker).read_text())["training"])
        else:
            pairs = pretraining_pairs(config.pretrain_corpora, config.pretrain_pairs_per_document, config.seed)
            batches = PairBatches(pairs, config.pretrain_batch_size, config.pretrain_pairs_per_epoch)
            loss = TokenSetContrastiveLoss(vocabulary, config.temperature, distillation=distilling(pairs))
            result = _train_stage(model, "pretrain", batches, loss, config, config.pretrain_epochs,
                                  config.pretrain_learning_rate, resume)
            result["pairs"] = len(pairs)
            summary["stages"].append(result)
            if is_main_process():
                model.save(pretrained, training=result, fp16=False)
            start_afresh(output, ("finetune",))  # a fine-tuning of an earlier pre-training (fewer epochs) is stale
    if config.finetune_epochs:
        negatives = PooledNegatives(bm25_pools(training_set, config.negative_depth), training_set.documents,
                                    training_set.positives, config.hard_negatives)
        loss = TokenSetContrastiveLoss(vocabulary, config.temperature, negatives, distilling(training_set))
        result = _train_stage(model, "finetune", PairBatches(training_set, config.batch_size), loss, config,
                              config.finetune_epochs, config.finetune_learning_rate, resume)
        result["pairs"] = len(training_set)
        summary["stages"].append(result)
    if config.average_with_base:
        from semiret.models.base import average_weights

        torch.manual_seed(config.seed)  # the start again: a fresh decoder is initialised as the run's was
        average_weights(model.float(), starting_model(config)[0], config.average_with_base)
        summary["averaged_with_base"] = config.average_with_base
    summary["train_seconds"] = round(time.perf_counter() - started, 1)
    if is_main_process():
        model.save(output / "model", training=summary)  # its config too: what `semiret models` says it was trained on
        summary = write_run_summary(output, summary)
    return summary
