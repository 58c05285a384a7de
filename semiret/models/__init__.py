"""Models: encoders (one module per family), the models each method trains, and where saved ones live.

Encoder classes are imported on first use, so importing :mod:`semiret.models` stays free of torch.
"""

from importlib import import_module

_LAZY = {
    "SparseVectors": "semiret.models.sparse",
    "TextEncoder": "semiret.models.base",
    "SpladeEncoder": "semiret.models.splade",
    "VDREncoder": "semiret.models.vdr",
    "DenseEncoder": "semiret.models.dense",
    "InferenceFreeModel": "semiret.models.inference_free",
    "SiDRModel": "semiret.models.sidr",
    "ENCODERS": "semiret.models.encoders",
    "load_encoder": "semiret.models.encoders",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'semiret.models' has no attribute {name!r}")
