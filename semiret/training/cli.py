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
    epochs: int = typer.Option(10), batch_size: int = typer.Option(32),
    learning_rate: float = typer.Option(5e-5), warmup_epochs: float = typer.Option(1.0),
    query_max_length: int = typer.Option(64), document_max_length: int = typer.Option(256),
    seed: int = typer.Option(12345), threads: Optional[int] = typer.Option(None),
    resume: bool = typer.Option(True, help="Continue from the run folder's last checkpoint."),
):
    """Train SiDR (semi-parametric contrastive loss, in-training retrieved negatives)."""
    from semiret.data.paths import dataset
    from semiret.sidr import SiDRTrainingConfig, train_sidr

    config = SiDRTrainingConfig(
        data=str(dataset(data)), output=str(output), split=split, base=base, shared=shared, head=head, top_k=top_k,
        loss_form=loss_form, semi_parametric=semi_parametric, negatives=negatives, pool_size=pool_size,
        epochs=epochs, batch_size=batch_size, learning_rate=learning_rate, warmup_epochs=warmup_epochs,
        query_max_length=query_max_length, document_max_length=document_max_length, seed=seed, threads=threads)
    summary = train_sidr(config, resume=resume)
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}))
