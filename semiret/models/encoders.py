"""Every encoder family by name, and loading of saved encoders."""

from __future__ import annotations

from pathlib import Path

import torch

from semiret.data import packaged
from semiret.errors import SemiretError
from semiret.models.base import DELTA_FILE, DELTA_ROWS, ENCODER_FILE, HEAD_FILE, TextEncoder, read_weights
from semiret.models.checkpoints import read_model_json
from semiret.models.dense import DenseEncoder
from semiret.models.devices import to_encoding_device
from semiret.models.splade import SpladeEncoder
from semiret.models.vdr import VDREncoder

ENCODERS: dict[str, type[TextEncoder]] = {
    e.family: e for e in (SpladeEncoder, VDREncoder, DenseEncoder)
}


def load_encoder(model: str, family: str | None = None, **options) -> TextEncoder:
    """An encoder from a directory written by :meth:`TextEncoder.save` (family and options come with it),
    or ``model`` (registry name, directory, hub id) initialised as ``family``; weights in float32.

    A name that is no local model folder but a saved encoder shipped in the packaged checkpoints folder
    (``hce-scifact``) loads that one (a folder of that name holding something else, an index named after its model,
    does not hide it); a local saved encoder loads its own weights whatever its name (``minilm``)."""
    shipped = packaged.PACKAGED_CHECKPOINTS / model
    if not any((Path(model) / name).is_file() for name in (ENCODER_FILE, "config.json")) and (
            shipped / ENCODER_FILE).is_file():
        model = str(shipped)
    saved = Path(model) / ENCODER_FILE
    base = None
    if saved.is_file():
        model = str(Path(model).absolute())  # the folder, not a registry model of its name
        config = read_model_json(saved)
        saved_family = config.pop("family", None)
        if saved_family not in ENCODERS:
            raise SemiretError(f"{saved} names no encoder family ({', '.join(ENCODERS)}), got {saved_family!r} "
                               "(copy the model folder again)")
        base = config.pop("base", None)  # saved as the weights that differ from this packaged model's
        if family is not None and family != saved_family:
            raise SemiretError(f"{model} is a saved {saved_family} encoder, not a {family} one: load it as "
                               f"{saved_family} (a retriever of {saved_family} vectors)")
        family = saved_family
        options = {**config, **{k: v for k, v in options.items() if v is not None}}
    if family is None and model in packaged.REGISTRY:  # (minilm: dense)
        family = packaged.REGISTRY[model].family
    if family is None:
        raise SemiretError(f"{model!r} is not a saved encoder: say which family to load it as "
                           f"({', '.join(ENCODERS)})")
    if family not in ENCODERS:
        raise SemiretError(f"unknown encoder family {family!r} (known: {', '.join(ENCODERS)})")
    options = {k: v for k, v in options.items() if v is not None}
    if base is None:
        encoder = ENCODERS[family].from_pretrained(model, **options)
    else:
        encoder = ENCODERS[family].from_pretrained(base, **options)
        _apply_delta(encoder, Path(model))
    head = Path(model) / HEAD_FILE
    own = encoder.own_head_state() if saved.is_file() else {}  # a saved encoder wrote these beside its backbone
    if head.is_file():
        missing, unexpected = encoder.load_state_dict(read_weights(head), strict=False)
        if unexpected:
            raise SemiretError(f"{head} holds weights this {family} encoder does not have: {unexpected[:3]}")
        missing = [name for name in missing if name in own]
        if missing:
            raise SemiretError(f"{head} lacks weights of this {family} encoder's head: {missing[:3]} (copy the model "
                               "folder again)")
    elif own:  # an untrained head would encode silently
        raise SemiretError(f"{model} is a saved {family} encoder with a head of its own, and its {HEAD_FILE} is "
                           f"missing (copy the model folder again)")
    # Checkpoints are stored in float16 to stay small; CPUs compute in it several times slower than in float32.
    return to_encoding_device(encoder.float())


def _apply_delta(encoder: TextEncoder, directory: Path) -> None:
    """Overwrite the base model's backbone weights with those saved in ``directory`` (:data:`DELTA_FILE`: whole
    weights, and matrices' changed rows beside their numbers, :data:`DELTA_ROWS`); the encoder is then named by
    that directory (an index records it, and finds its tokenizer there)."""
    path = directory / DELTA_FILE
    delta = read_weights(path)
    numbers = {name[: -len(DELTA_ROWS)]: delta.pop(name) for name in list(delta) if name.endswith(DELTA_ROWS)}
    rows = {name: delta.pop(name, None) for name in numbers}
    unexpected = encoder.backbone.load_state_dict(delta, strict=False).unexpected_keys
    state = encoder.backbone.state_dict()
    unexpected += [name for name in rows if name not in state]
    if unexpected:
        raise SemiretError(f"{path} holds weights the base model does not have: {unexpected[:3]}")
    for name, values in rows.items():
        target, at = state[name], numbers[name]
        if values is None or values.shape != (len(at), *target.shape[1:]) or (len(at) and int(at.max()) >= len(target)):
            raise SemiretError(f"{path}: the changed rows of {name} do not fit the base model's {tuple(target.shape)}")
        with torch.no_grad():
            target.index_copy_(0, at.long(), values.to(target.dtype))
    encoder.name = encoder.inputs.model_name = str(directory)  # (its messages name it too, not the base)


def average_with_base(model: str, base: str, share: float, out: str | Path) -> Path:
    """Save to ``out`` the dense encoder ``model`` with its weights averaged with ``base``'s, ``share`` the base's
    (WiSE-FT, :func:`semiret.models.base.average_weights`), in float16 at ``model``'s length limit."""
    from semiret.models.base import average_weights

    encoder = load_encoder(model, "dense")
    average_weights(encoder, load_encoder(base, "dense", max_length=encoder.max_length), share)
    return encoder.save(out, fp16=True)
