"""Loaders for the three kinds of transformers models semiret uses (masked LM, encoder, causal LM), from the
local directories :mod:`semiret.data.packaged` resolves, offline, with errors made plain."""

from __future__ import annotations

import threading
from contextlib import contextmanager

from safetensors import SafetensorError

from semiret.data.packaged import gguf_file, model_directory
from semiret.errors import SemiretError


def _load(loader, name_or_path: str, what: str, **kwargs):
    """Call a transformers ``from_pretrained`` on a local directory, offline, with errors made plain.

    Weights the checkpoint lacks (a bare encoder's pooler, loaded from an MLM checkpoint) are initialised from a
    fixed seed, without touching the caller's random state: a model loads to the same weights every time, which
    the fingerprint an index records of its model relies on (:func:`semiret.models.base.weights_fingerprint`)."""
    hf_logging, = _transformers("logging")
    hf_logging.disable_progress_bar()  # semiret shows its own progress; loading weights is quick
    path = model_directory(name_or_path, tokenizer_only="Tokenizer" in loader.__name__)
    gguf = gguf_file(name_or_path)
    if gguf:
        kwargs["gguf_file"] = gguf
    with _LOADING:
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # loading an MLM checkpoint as a bare encoder reports its unused head
        try:
            with _fixed_initialisation(loader):
                return loader.from_pretrained(path, local_files_only=True, **kwargs)
        except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:  # (a file cut short, corrupt)
            raise SemiretError(f"cannot load {name_or_path!r} as a {what}: {exc}") from None
        finally:
            hf_logging.set_verbosity(verbosity)


_LOADING = threading.Lock()
"""One model loads at a time in a process: transformers' loading swaps process-wide state (weight initialisation, its
logging's verbosity), and loads in threads at once (a server's first searches, each loading the retriever's model)
reported tied weights missing, after which no load in the process succeeded."""


def _transformers(*names: str) -> list:
    """transformers' members by name, imported under :data:`_LOADING`: its lazy module imports a member's module at
    first access, and two threads doing so at once (a server's first searches of two cold indexes) failed with
    ``ImportError: cannot import name 'AutoModel' from 'transformers'``."""
    with _LOADING:
        import transformers

        return [getattr(transformers, name) for name in names]


@contextmanager
def _fixed_initialisation(loader):
    """Seed torch inside the block and restore the caller's random state after it (tokenizers need no torch)."""
    if "Tokenizer" in loader.__name__:
        yield
        return
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")
"""Files one of which holds a model's vocabulary (fast, WordPiece, BPE, SentencePiece); a GGUF file holds its own."""


def load_tokenizer(name_or_path: str):
    """The model's Hugging Face fast tokenizer."""
    AutoTokenizer, = _transformers("AutoTokenizer")

    path = model_directory(name_or_path, tokenizer_only=True)
    if not any((path / name).is_file() for name in TOKENIZER_FILES) and not gguf_file(name_or_path):
        raise SemiretError(f"{name_or_path!r} has no tokenizer files ({', '.join(TOKENIZER_FILES)}): transformers "
                           "would make a tokenizer of a few placeholder tokens, every word unknown")
    tokenizer = _load(AutoTokenizer, name_or_path, "tokenizer")
    if not getattr(tokenizer, "is_fast", False):
        raise SemiretError(f"{name_or_path!r} has no fast tokenizer (tokenizer.json is required)")
    return tokenizer


def load_masked_lm(name_or_path: str):
    """A masked language model with its MLM head (SPLADE, VDR initialised from an MLM)."""
    AutoModelForMaskedLM, = _transformers("AutoModelForMaskedLM")

    model, info = _load(AutoModelForMaskedLM, name_or_path, "masked language model", output_loading_info=True)
    missing = sorted(info.get("missing_keys") or [])
    if missing:  # transformers starts them random, and its report of it is silenced above
        raise SemiretError(f"{name_or_path!r} is not a masked language model with its MLM head: {len(missing)} "
                           f"weights are missing ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}) and "
                           f"would start random (a sentence encoder such as minilm has no MLM head)")
    return model.eval()


def load_encoder_model(name_or_path: str):
    """A bare transformer encoder (no task head): dense bi-encoders, VDR."""
    AutoModel, = _transformers("AutoModel")

    return _load(AutoModel, name_or_path, "transformer encoder").eval()


def load_sequence_classifier(name_or_path: str):
    """A transformer with a trained sequence classification head (a cross-encoder: a query and a document in, a
    score out); a checkpoint saved without one (a bare encoder, a masked LM) is refused: its head would be random."""
    AutoConfig, AutoModelForSequenceClassification = _transformers("AutoConfig", "AutoModelForSequenceClassification")

    config = _load(AutoConfig, name_or_path, "model configuration")
    architectures = getattr(config, "architectures", None) or []
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        raise SemiretError(f"{name_or_path!r} is no cross-encoder: its configuration names "
                           f"{', '.join(architectures) or 'no architecture'}, not a ...ForSequenceClassification head "
                           "trained to score a query and a document (cross-encoder/ms-marco-MiniLM-L-6-v2 is one); to rank by late "
                           "interaction of its token vectors instead: --colbert (kind='late-interaction')")
    return _load(AutoModelForSequenceClassification, name_or_path, "cross-encoder").eval()


def load_causal_lm(name_or_path: str):
    """A causal language model and its tokenizer (GGUF checkpoints are dequantized by transformers)."""
    AutoModelForCausalLM, AutoTokenizer = _transformers("AutoModelForCausalLM", "AutoTokenizer")

    model = _dequantized(_load(AutoModelForCausalLM, name_or_path, "causal language model").eval(), name_or_path)
    return model, _load(AutoTokenizer, name_or_path, "tokenizer")


def _dequantized(model, name_or_path: str):
    """A model loaded from GGUF as the plain float model transformers dequantized it into (trainable, savable with
    ``save_pretrained``); an error when transformers kept the weights packed (a GGUF matmul kernel installed)."""
    if getattr(model, "hf_quantizer", None) is None:
        return model
    if not all(p.is_floating_point() for p in model.parameters()) or any(
            "gguf" in type(m).__name__.lower() for m in model.modules()):
        raise SemiretError(f"{name_or_path!r}: transformers kept the GGUF weights packed (the `kernels` package is "
                           "installed), so they cannot be trained or saved: uninstall `kernels`")
    model.hf_quantizer, model.is_quantized = None, False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    return model
