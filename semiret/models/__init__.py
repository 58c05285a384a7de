"""Models: the registry of offline packaged models, and encoders."""

from semiret.models.registry import REGISTRY, resolve_model_path

__all__ = ["REGISTRY", "resolve_model_path"]
