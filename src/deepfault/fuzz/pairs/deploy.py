"""Moved: the deployment formats live in :mod:`deepfault.models.deploy`, beside the models.

An import from here still works, with a ``DeprecationWarning``.
"""

from ..._deprecation import moved_names

__getattr__ = moved_names(__name__, {name: "deepfault.models.deploy" for name in (
    "DEPLOY_FORMATS", "DeploymentResult", "export_onnx", "list_deploy_formats", "make_deployment",
    "register_deploy_format", "CALIBRATION", "OPSET")})
