"""``semiret train <method>``: one command per method's training recipe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

train_app = typer.Typer(no_args_is_help=True, help="Train a method's models.")


@train_app.command("sidr")
def train_sidr_command(
    data: str = typer.Option("scifact", help="BEIR collection (folder or name under shared/data)."),
    output: Path = typer.Option(Path("runs/sidr"), help="Run folder: checkpoints, bag-of-tokens index, final model."),
    split: str = typer.Option("train", help="Qrels split to train on."),
    base: str = typer.Option("splade-tiny", help="Masked LM to initialise both encoders from."),
    shared: bool = typer.Option(False, help="One encoder for queries and documents."),
    head: str = typer.Option("mlm", help="'mlm': the pretrained MLM head; 'fresh': the authors' LayerNorm + tied embeddings."),
    top_k: int = typer.Option(768, help="Dimensions kept per vector."),
    loss_form: str = typer.Option("paper", help="'paper' (L_para + L_semi-para) or 'code' (the authors' 4-term loss)."),
    semi_parametric: bool = typer.Option(True, help="Keep the semi-parametric loss terms (off: the ablation)."),
    negatives: str = typer.Option("retrieved", help="'retrieved' (in-training beta search) or 'none' (in-batch only)."),
    pool_size: int = typer.Option(20, help="Negative pool size m per query."),
    epochs: int = typer.Option(15), batch_size: int = typer.Option(32),
    learning_rate: float = typer.Option(2e-4), warmup_epochs: float = typer.Option(1.0),
    query_max_length: int = typer.Option(64), document_max_length: int = typer.Option(256),
    seed: int = typer.Option(12345), threads: Optional[int] = typer.Option(None),
    resume: bool = typer.Option(True, help="Continue from the run folder's last checkpoint."),
):
    """Train SiDR (semi-parametric contrastive loss, in-training retrieved negatives)."""
    from semiret.data.paths import dataset
    from semiret.methods.sidr import SiDRTrainingConfig, train_sidr

    config = SiDRTrainingConfig(
        data=str(dataset(data)), output=str(output), split=split, base=base, shared=shared, head=head, top_k=top_k,
        loss_form=loss_form, semi_parametric=semi_parametric, negatives=negatives, pool_size=pool_size,
        epochs=epochs, batch_size=batch_size, learning_rate=learning_rate, warmup_epochs=warmup_epochs,
        query_max_length=query_max_length, document_max_length=document_max_length, seed=seed, threads=threads)
    summary = train_sidr(config, resume=resume)
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}))


@train_app.command("inference-free")
def train_inference_free_command(
    data: str = typer.Option("scifact", help="BEIR collection to fine-tune on (folder or name under shared/data)."),
    output: Path = typer.Option(Path("runs/inference-free"), help="Run folder: teacher caches, checkpoints, final model."),
    split: str = typer.Option("train", help="Qrels split to fine-tune on."),
    base: str = typer.Option("splade-tiny", help="Masked LM (SPLADE) to initialise the document encoder from."),
    idf: str = typer.Option("msmarco", help="Query token weights: 'msmarco', 'corpus' (IDF of --data's documents), 'corpus:<name or folder>' (of another collection's, e.g. the unlabelled target corpus) or a JSON {token: weight} table."),
    idf_aware: bool = typer.Option(True, help="IDF-aware student score (Eq. 5); off: the plain binary score (Eq. 2)."),
    teachers: str = typer.Option("dense:minilm@128,sparse:splade-tiny,bm25",
                                 help="Comma-separated teachers: dense[:model][@length], sparse[:model][@length], bm25."),
    normalize_teachers: bool = typer.Option(True, help="Min-max normalize, average and scale teachers; off: 'simply add' raw scores."),
    fit_student_scale: bool = typer.Option(True, help="Distil the student's scores times a factor fitted per step; off: the paper's plain KL."),
    pretrain: Optional[list[str]] = typer.Option(None, help="Corpora for label-free pre-training (repeatable); 'none' skips it. Default: --data."),
    pseudo_queries_per_document: int = typer.Option(1), pretrain_queries_per_epoch: int = typer.Option(1024),
    pretrain_epochs: int = typer.Option(2), pretrain_scale: float = typer.Option(10.0),
    pretrain_flops_weight: float = typer.Option(1e-7, help="FLOPS weight in pre-training (the paper: 1e-7)."),
    pretrain_learning_rate: float = typer.Option(1e-4),
    pretrain_max_length: int = typer.Option(128),
    pretrain_in_batch_negatives: bool = typer.Option(False, help="Score each pre-training query against every document of its batch (the paper's pre-training), not only its own candidates."),
    finetune_epochs: int = typer.Option(8), finetune_scale: float = typer.Option(30.0),
    finetune_flops_weight: float = typer.Option(0.002, help="FLOPS weight in fine-tuning (the paper's Pareto point, 0.02, over-prunes SPLADE-tiny)."),
    finetune_learning_rate: float = typer.Option(2e-4),
    finetune_max_length: int = typer.Option(256),
    finetune_in_batch_negatives: bool = typer.Option(False, help="The same in fine-tuning."),
    batch_size: int = typer.Option(32, help="Queries per step."), candidates: int = typer.Option(8, help="Documents per query."),
    mining_depth: int = typer.Option(20), seed: int = typer.Option(12345), threads: Optional[int] = typer.Option(None),
    teacher_cache: Optional[str] = typer.Option(None, help="Teacher vector cache folder (default <output>/teachers)."),
    document_threshold: bool = typer.Option(True, help="After fine-tuning, record a document-weight threshold that keeps nDCG@10 on the fine-tuning split (applied at indexing)."),
    resume: bool = typer.Option(True, help="Continue from the run folder's checkpoints."),
):
    """Train an inference-free learned sparse retriever (IDF-aware KL distillation from an ensemble, FLOPS)."""
    from semiret.data.paths import dataset
    from semiret.methods.inference_free import InferenceFreeTrainingConfig, train_inference_free

    corpora = [str(dataset(data))] if pretrain is None else [str(dataset(c)) for c in pretrain if c != "none"]
    config = InferenceFreeTrainingConfig(
        data=str(dataset(data)), output=str(output), split=split, base=base, idf=idf, idf_aware=idf_aware,
        teachers=teachers, normalize_teachers=normalize_teachers, fit_student_scale=fit_student_scale,
        pretrain_corpora=corpora,
        pseudo_queries_per_document=pseudo_queries_per_document, pretrain_queries_per_epoch=pretrain_queries_per_epoch,
        pretrain_epochs=pretrain_epochs, pretrain_scale=pretrain_scale, pretrain_flops_weight=pretrain_flops_weight,
        pretrain_learning_rate=pretrain_learning_rate, pretrain_max_length=pretrain_max_length,
        pretrain_in_batch_negatives=pretrain_in_batch_negatives,
        finetune_epochs=finetune_epochs, finetune_scale=finetune_scale, finetune_flops_weight=finetune_flops_weight,
        finetune_learning_rate=finetune_learning_rate, finetune_max_length=finetune_max_length,
        finetune_in_batch_negatives=finetune_in_batch_negatives,
        batch_size=batch_size, candidates=candidates, mining_depth=mining_depth, seed=seed, threads=threads,
        teacher_cache=teacher_cache, choose_document_threshold=document_threshold)
    summary = train_inference_free(config, resume=resume)
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}))
