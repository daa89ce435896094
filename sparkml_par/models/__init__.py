"""Model registry and the built-in models; importing the package registers mlp, cnn and transformer."""

from sparkml_par.models import cnn, mlp, transformer  # noqa: F401  (registration side effect)
from sparkml_par.models.registry import build_from_spec, build_model, model_spec, register_model, registered_models

__all__ = ["build_from_spec", "build_model", "model_spec", "register_model", "registered_models"]
