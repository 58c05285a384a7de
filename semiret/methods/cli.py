"""``semiret train <method>``: one command per recipe, its flags generated from the recipe's configuration
dataclass (:func:`semiret.options.command_with_options`): names, defaults and help are the fields'."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer

from semiret.data.packaged import check_run_output
from semiret.errors import SemiretError
from semiret.methods.adapt import AdaptConfig
from semiret.methods.gdr import GDRTrainingConfig, train_gdr
from semiret.methods.hce import HCETrainingConfig, train_hce
from semiret.methods.inference_free import InferenceFreeTrainingConfig, train_inference_free
from semiret.methods.nail import NailTrainingConfig, train_nail
from semiret.methods.sidr import SiDRTrainingConfig, train_sidr
from semiret.options import command_with_options
from semiret.search.catalog import write_model_card

log = logging.getLogger(__name__)

RECIPES = {
    "sidr": (SiDRTrainingConfig, train_sidr,
             "Train SiDR (semi-parametric contrastive loss, in-training retrieved negatives)."),
    "inference-free": (InferenceFreeTrainingConfig, train_inference_free,
                       "Train an inference-free learned sparse retriever (IDF-aware KL distillation from an "
                       "ensemble, FLOPS)."),
    "hce": (HCETrainingConfig, train_hce,
            "Train HCE (a dense encoder against a k-means tree of its corpus: sibling-centroid softmaxes, sampled "
            "sibling negatives, EM re-clustering; --loss contrastive: plain in-batch fine-tuning)."),
    "nail": (NailTrainingConfig, train_nail,
             "Train NAIL (non-autoregressive decoder over the vocabulary; self-supervised pre-training, then BM25 "
             "hard negatives; in-batch softmax)."),
    "gdr": (GDRTrainingConfig, train_gdr,
            "Train GDR (a cluster-id decoder over divisive k-means ids of E_D's vectors, and E_Q matched against "
            "E_D's frozen vectors: L_inter + L_intra with cluster-adaptive negatives; --identifiers document: "
            "the per-document-id baseline)."),
}
"""Command name -> (configuration dataclass, training function ``train(config, resume) -> summary``, help)."""

train_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Train a method's models.")


def _command(name: str):
    config_class, _, help_text = RECIPES[name]

    def train(resume: bool = typer.Option(True, help="Continue from the run folder's last checkpoint."),
              options: dict | None = None) -> None:
        from semiret.models.devices import encoding_on
        from semiret.training.distributed import is_main_process, training_device

        config_class, train_recipe, _ = RECIPES[name]
        config = config_class(**options)
        # never into the packaged models, whatever a recipe writes there, nor over the model a run starts from (a
        # resume, or an average with the base, would read the run's own model as that start)
        starts = (getattr(config, "base", None), getattr(config, "document_encoder", None))
        check_run_output(Path(config.output), tuple(Path(p) for p in starts if p and Path(p).is_dir()))
        with encoding_on(str(training_device(config.device))):  # what the recipe encodes outside training, there too
            try:
                summary = train_recipe(config, resume=resume)
            except KeyboardInterrupt:
                log.warning("interrupted: %s keeps its last checkpoint (each epoch's); the same command resumes from "
                            "it", config.output)
                raise
        if is_main_process():  # under torchrun one summary, as one summary.json, one model card
            print(json.dumps({k: v for k, v in summary.items() if k != "config"}))
            _write_card(summary, name)

    train.__doc__ = help_text
    return command_with_options(train, [config_class], unset_defaults=False)


def _write_card(summary: dict, recipe: str | None) -> None:
    """The model card (README.md) in the model a run saved (``summary["model"]``, every recipe's ``<output>/model``):
    the model is kept whatever befalls its card, which ``semiret models --card`` prints again."""
    model = summary.get("model")
    if model is None or not Path(model).is_dir():
        return
    try:
        write_model_card(model, recipe)
    except (OSError, SemiretError) as exc:
        log.warning("no model card written into %s: %s", model, exc)


for _name in RECIPES:
    train_app.command(_name)(_command(_name))


def adapt_command(estimate_only: bool = typer.Option(False, help="Print the time estimate and stop."),
                  options: dict | None = None) -> None:
    """Adapt a model to your corpus without labels (pseudo-queries, teachers with BM25; kept only when a
    held-out known-item check does not get worse); prints the report."""
    from semiret.methods.adapt import adapt

    report = adapt(AdaptConfig(**options), confirm=lambda seconds: not estimate_only)
    _write_card(report, None)  # (the model kept: adapted, or the start's copy; none for an estimate)
    print(json.dumps(report))


adapt_command = command_with_options(adapt_command, [AdaptConfig], unset_defaults=False)
