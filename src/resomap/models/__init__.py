"""Model registry (torchvision, small CNNs, any `timm:<name>`), ModelSpec with resolution-aware CAM layers."""

from resomap.models import (  # noqa: F401  (registers the built-in models)
    classical,
    hog,
    pretrained,
    resnet_small,
    segmentation,
    small,
    zoo,
)
from resomap.models.build import (
    ModelRow,
    build_model,
    canonical_name,
    check_input_size,
    get_spec,
    model_table,
    set_grad_checkpointing,
    smallest_input_side,
    usable_resolutions,
)
from resomap.models.registry import MODELS, families, list_models, model_task, register_model
from resomap.models.spec import CamLayer, ModelSpec, unwrap
from resomap.models.weights import adapt_input_conv_, load_pretrained

__all__ = [
    "MODELS",
    "CamLayer",
    "ModelRow",
    "ModelSpec",
    "adapt_input_conv_",
    "build_model",
    "canonical_name",
    "check_input_size",
    "families",
    "get_spec",
    "list_models",
    "load_pretrained",
    "model_table",
    "model_task",
    "register_model",
    "set_grad_checkpointing",
    "smallest_input_side",
    "unwrap",
    "usable_resolutions",
]
