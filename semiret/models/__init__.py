"""Models: the registry of offline packaged models, and encoders (one module per family).

Encoder classes are imported on first use, so importing :mod:`semiret.models` stays free of torch.
"""

from importlib import import_module

from semiret.models.registry import REGISTRY, resolve_model_path

_LAZY = {
    "SparseVectors": "semiret.models.sparse",
    "TextEncoder": "semiret.models.base",
    "SpladeEncoder": "semiret.models.splade",
    "VDREncoder": "semiret.models.vdr",
    "DenseEncoder": "semiret.models.dense",
    "InferenceFreeEncoder": "semiret.models.inference_free",
    "ENCODERS": "semiret.models.encoders",
    "load_encoder": "semiret.models.encoders",
}

__all__ = ["REGISTRY", "resolve_model_path", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'semiret.models' has no attribute {name!r}")
