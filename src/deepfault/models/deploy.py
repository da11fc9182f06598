"""Deploying a model: compression (pruning, quantisation), ONNX export and the deployment formats.

The model transformations DRFuzz's scenarios make their ``M2`` with (:func:`prune_weights`,
:func:`quantize_fp16`, :func:`quantize_int8`) and the deployment scenario: a float PyTorch model
(``M1``) and the files it is deployed as (``M2``, :data:`DEPLOY_FORMATS`) <- add a format here.

| format | file | how it is made |
| --- | --- | --- |
| ``onnx`` | ``-float.onnx`` | ``torch.onnx.export(dynamo=False)``, opset 17, any batch (1) |
| ``onnx-int8`` | ``-int8.onnx`` | ONNX Runtime's ``quantize_dynamic``: int8 weights (2) |
| ``onnx-int8-static`` | ``-int8-static.onnx`` | ONNX Runtime's ``quantize_static``, QDQ, int8 (3) |
| ``onnx-fp16`` | ``-fp16.onnx`` | ``model.half()`` exported: float16 weights, activations, input, output |

(1) The TorchScript-based exporter: torch 2.13's default dynamo exporter needs onnxscript.
(2) After ``quant_pre_process``; activations are quantised per batch at run time, and convolutions
become ``ConvInteger``, linear layers ``MatMulInteger``. (3) Weights and activations int8,
calibrated (MinMax) on a seeded sample of training inputs.

Each ``M2`` runs in ONNX Runtime as a black box (``deepfault regress --m2 FILE --runtime
onnxruntime``; an int8 or float16 file goes there on its own). ``M1`` is written as a deepfault
``.pt`` file. Every file is checked on the test split: accuracy, and the test inputs ``M1``
classifies correctly and the deployed file does not (the regressions fuzzing starts from).

Examples:
    >>> r = make_deployment("lenet5-mnist.pt", "mnist", out_dir="deploy")  # doctest: +SKIP
    >>> r.files["onnx-int8"], r.regressions["onnx-int8"]  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..core.registry import Registry, suggestion
from ..errors import DeepFaultError

__all__ = ["DEPLOY_FORMATS", "DeploymentResult", "deployment_files", "export_onnx", "list_deploy_formats",
           "make_deployment",
           "prune_weights", "quantize_fp16", "quantize_int8", "quantize_int8_tensor",
           "register_deploy_format", "safe_stem", "sparsity"]

#: Training inputs the static quantisation is calibrated on (the first N; seeded order).
CALIBRATION = 512
#: The ONNX opset of the exports.
OPSET = 17

# --- compression: pruning and quantisation, in torch -------------------------------------------


def _weight(module: nn.Module) -> torch.Tensor:
    """The ``weight`` of a Linear or Conv layer (typed: ``Module.__getattr__`` is not)."""
    weight = module.weight
    if not isinstance(weight, torch.Tensor):
        raise DeepFaultError(f"{type(module).__name__} has no weight tensor")
    return weight


def _weighted_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)) and m.weight is not None]


def prune_weights(model: nn.Module, *, amount: float = 0.5, permanent: bool = True) -> nn.Module:
    """Remove the ``amount`` smallest-magnitude weights of every Linear and Conv layer, in
    place (per-layer L1 unstructured pruning, :func:`torch.nn.utils.prune.l1_unstructured`:
    exactly ``round(amount * n)`` of a layer's ``n`` weights). Biases are kept.

    Args:
        model: The network, changed in place.
        amount: Share of each layer's weights to remove, in [0, 1).
        permanent: Make the zeros plain weights now. With ``False`` the masks stay attached
            (``weight_orig`` and ``weight_mask``, so the pruned weights stay zero while the
            model is trained); a second call with ``permanent=True`` makes them plain.

    Returns:
        ``model``.
    """
    from torch.nn.utils import prune

    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount < 1:
        raise DeepFaultError(f"amount must be a share of the weights in [0, 1); got {amount!r}")
    for _, module in _weighted_layers(model):
        if not prune.is_pruned(module):
            prune.l1_unstructured(module, "weight", amount=float(amount))
        if permanent:
            prune.remove(module, "weight")
    return model


def sparsity(model: nn.Module) -> dict[str, float]:
    """Share of exactly-zero weights of each Linear and Conv layer, by qualified name."""
    return {name: float((_weight(m) == 0).float().mean()) for name, m in _weighted_layers(model)}


def quantize_fp16(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose floating-point parameters and buffers are rounded to float16
    and stored back as float32 (so it runs wherever the original does).
    """
    out = copy.deepcopy(model)
    with torch.no_grad():
        for t in (*out.parameters(), *out.buffers()):
            if t.is_floating_point():
                t.copy_(t.to(torch.float16).to(t.dtype))
    return out


def quantize_int8_tensor(w: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Per-tensor symmetric int8 quantisation, then dequantisation.

    ``scale = max|w| / 127``, ``q = clamp(round(w / scale), -127, 127)``, returns
    ``(q * scale, scale)``; so ``|w - q * scale| <= scale / 2`` everywhere. An all-zero
    tensor is returned unchanged with scale 0.
    """
    peak = float(w.detach().abs().max()) if w.numel() else 0.0
    if peak == 0.0:
        return w.detach().clone(), 0.0
    scale = peak / 127.0
    q = torch.clamp(torch.round(w.detach() / scale), -127, 127)
    return (q * scale).to(w.dtype), scale


def quantize_int8(model: nn.Module) -> tuple[nn.Module, dict[str, float]]:
    """A copy of ``model`` with every Linear and Conv weight quantised by
    :func:`quantize_int8_tensor` (biases stay float32, as int8 inference keeps them at a
    finer scale), and the per-tensor scales by qualified parameter name.
    """
    out = copy.deepcopy(model)
    scales = {}
    with torch.no_grad():
        for name, module in _weighted_layers(out):
            weight = _weight(module)
            q, scale = quantize_int8_tensor(weight)
            weight.copy_(q)
            scales[f"{name}.weight" if name else "weight"] = scale
    return out, scales


# --- ONNX export and the deployment formats ------------------------------------------------------

#: ``export(model, out_path, sample, *, float_path, calibration) -> details``: writes one file.
Exporter = Callable[..., dict]
DEPLOY_FORMATS: Registry[tuple[str, Exporter]] = Registry("deployment format")


def register_deploy_format(name: str, *, suffix: str):
    """Decorator registering an exporter as deployment format ``name`` writing ``...-SUFFIX``."""

    def add(fn: Exporter) -> Exporter:
        DEPLOY_FORMATS.register(name, (suffix, fn))
        return fn

    return add


def list_deploy_formats() -> list[str]:
    """The deployment formats, in registration order."""
    return [n for n, _ in DEPLOY_FORMATS.items()]


def _quantization():
    try:
        from onnxruntime import quantization
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError("the ONNX deployment formats need onnx and onnxruntime; install the "
                                  "extras: pip install -e '.[onnx,runtime]'") from err
    return quantization


def export_onnx(model: nn.Module, path: str | os.PathLike, sample: torch.Tensor) -> Path:
    """Write ``model`` as an ONNX file with a dynamic batch (input ``input``, output ``scores``).

    Uses the TorchScript-based exporter (``dynamo=False``), which needs nothing beyond torch and
    onnx; torch 2.13's default dynamo exporter needs onnxscript.
    """
    import warnings

    from .._io import atomic_path

    with atomic_path(path) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated in favour of dynamo
        torch.onnx.export(model.eval(), (sample,), str(tmp), dynamo=False, opset_version=OPSET,
                          input_names=["input"], output_names=["scores"],
                          dynamic_axes={"input": {0: "batch"}, "scores": {0: "batch"}})
    return Path(path)


def _ops(path: Path) -> dict[str, int]:
    from .blackbox import _onnx_ops

    return _onnx_ops(path)


@register_deploy_format("onnx", suffix="float.onnx")
def _float(model, path, sample, *, float_path, calibration) -> dict:
    """Float32 ONNX."""
    export_onnx(model, path, sample)
    return {"exporter": "torch.onnx.export(dynamo=False)", "opset": OPSET, "ops": _ops(path)}


def _preprocessed(float_path: Path, path: Path) -> Path:
    """The float model after ORT's quantisation pre-processing (shape inference, folding)."""
    q = _quantization()
    pre = path.with_name(path.name + ".pre.tmp")  # a temporary: a killed run's is removed with its unit's
    q.shape_inference.quant_pre_process(str(float_path), str(pre), skip_symbolic_shape=True)
    return pre


@register_deploy_format("onnx-int8", suffix="int8.onnx")
def _int8_dynamic(model, path, sample, *, float_path, calibration) -> dict:
    """Dynamic int8 quantisation."""
    q = _quantization()
    pre = _preprocessed(float_path, path)
    try:
        q.quantize_dynamic(str(pre), str(path), weight_type=q.QuantType.QInt8)
    finally:
        pre.unlink(missing_ok=True)
    ops = _ops(path)
    return {"method": "onnxruntime.quantization.quantize_dynamic", "weights": "int8 per tensor",
            "activations": "uint8, scale per batch at run time", "ops": ops,
            "quantised_convs": ops.get("ConvInteger", 0), "quantised_matmuls": ops.get("MatMulInteger", 0)}


@register_deploy_format("onnx-int8-static", suffix="int8-static.onnx")
def _int8_static(model, path, sample, *, float_path, calibration) -> dict:
    """Static QDQ int8 quantisation calibrated on training inputs."""
    q = _quantization()

    class Reader(q.CalibrationDataReader):  # type: ignore[name-defined]  # a module object's class
        def __init__(self):
            self.batches = iter([{"input": np.ascontiguousarray(calibration[i:i + 64], dtype=np.float32)}
                                 for i in range(0, len(calibration), 64)])

        def get_next(self):
            return next(self.batches, None)

    pre = _preprocessed(float_path, path)
    try:
        q.quantize_static(str(pre), str(path), Reader(), quant_format=q.QuantFormat.QDQ,
                          weight_type=q.QuantType.QInt8, activation_type=q.QuantType.QInt8,
                          calibrate_method=q.CalibrationMethod.MinMax)
    finally:
        pre.unlink(missing_ok=True)
        for extra in path.parent.glob("augmented_model*.onnx"):  # older ORT leaves its calibration graph
            extra.unlink(missing_ok=True)
    return {"method": "onnxruntime.quantization.quantize_static (QDQ, MinMax)", "weights": "int8",
            "activations": "int8", "calibration_inputs": len(calibration), "ops": _ops(path)}


@register_deploy_format("onnx-fp16", suffix="fp16.onnx")
def _fp16(model, path, sample, *, float_path, calibration) -> dict:
    """Float16 weights and activations."""
    half = copy.deepcopy(model).half()
    export_onnx(half, path, sample.half())
    return {"exporter": "torch.onnx.export(dynamo=False) of model.half()", "dtype": "float16",
            "ops": _ops(path)}


def safe_stem(name: str) -> str:
    """A file name's stem from a model or data set name: its stem, other characters than
    letters, digits and ``-_.`` as ``_``.
    """
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(str(name)).stem)



@dataclass(frozen=True)
class DeploymentResult:
    """The files a deployment scenario wrote and how each compares with ``M1`` on the test split.

    Attributes:
        m1_path: ``M1`` (the float PyTorch model, a deepfault ``.pt`` file; ``None`` for a
            caller's module, which has no zoo architecture to be saved under).
        files: Format -> the ``M2`` file written.
        m1_accuracy: ``M1``'s test accuracy.
        accuracy: Format -> the file's test accuracy, run in ONNX Runtime.
        regressions: Format -> test inputs ``M1`` gets right and the file wrong.
        fixes: Format -> the other way round.
        agreement: Format -> share of test inputs on which the file and ``M1`` predict the same.
        max_abs_diff: Format -> the largest difference of a probability between the file and ``M1``.
        details: Format -> how it was made (method, op counts).
        n_test: Test inputs.
        seconds: Wall time.
    """

    m1_path: Path | None
    files: dict[str, Path]
    m1_accuracy: float
    accuracy: dict[str, float]
    regressions: dict[str, int]
    fixes: dict[str, int]
    agreement: dict[str, float]
    max_abs_diff: dict[str, float]
    details: dict[str, dict] = field(default_factory=dict)
    n_test: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["m1_path"] = None if self.m1_path is None else str(self.m1_path)
        out["files"] = {k: str(v) for k, v in self.files.items()}
        return out


def make_deployment(
    model,
    data=None,
    *,
    out_dir: str | os.PathLike = "scenarios",
    formats: Sequence[str] | None = None,
    data_dir: str | os.PathLike | None = None,
    calibration: int = CALIBRATION,
    seed: int = 0,
    name: str | None = None,
) -> DeploymentResult:
    """Write ``M1`` and the deployment files of ``model`` (see the module's table).

    Writes ``OUT/deploy-NAME-m1.pt``, ``OUT/deploy-NAME-FORMAT-SUFFIX`` per format and
    ``OUT/deploy-NAME.json`` (the result), :func:`deployment_files`, as one unit: temporaries moved
    into place together at the end, so that an error, a kill or a full disk leaves none of them.

    Args:
        model: A torch model: a model file, :class:`~deepfault.models.ModelFile`, module or
            :class:`~deepfault.models.prepare.PreparedModel` (a black box cannot be exported).
        data: The data set (name, ``.npz`` or :class:`~deepfault.data.Dataset`; default: the one
            the file names); the exports take its native layout and range.
        out_dir: Where to write.
        formats: Formats to write, or their names as comma-separated text (``--formats``;
            default: all, :func:`list_deploy_formats`).
        data_dir: Data root.
        calibration: Training inputs (a seeded sample) the static quantisation is calibrated on.
        seed: Seed of that sample.
        name: The files' stem (default: the model file's stem or architecture).

    Returns:
        A :class:`DeploymentResult`.

    Raises:
        DeepFaultError: An unknown format, a black-box model, or no data set.
        ModuleNotFoundError: onnx or onnxruntime is missing.
    """
    from .._io import atomic_paths, write_json
    from ..checks import check_int
    from ..core.batches import predict

    formats = _checked_formats(formats)
    check_int("calibration", calibration)
    start = time.perf_counter()
    pm = _deployable(model, data, data_dir)
    d = pm.data
    module = copy.deepcopy(pm.module).cpu().eval()
    files = deployment_files(name or pm.name, formats, out_dir)
    with atomic_paths(*files.values()) as temporaries:
        paths = dict(zip(files, temporaries, strict=True))
        exports = _Exports(module, paths, files, _calibration_sample(d, calibration, seed))
        m1_path = files["m1"] if _save_m1(pm, paths["m1"]) is not None else None
        with torch.no_grad():
            p1 = _probabilities(predict(module, d.x_test), pm.output_kind)
        # the exports run before the clock is read (the arguments are evaluated in order)
        r = DeploymentResult(m1_path=m1_path, m1_accuracy=float((p1.argmax(1) == d.y_test).mean()),
                             n_test=len(d.y_test), **exports.compare_all(formats, d, p1),
                             seconds=time.perf_counter() - start)
        write_json(paths["result"], r.to_dict())
    return r


def deployment_files(name: str, formats: Sequence[str] | None, out_dir: str | os.PathLike) -> dict[str, Path]:
    """The files :func:`make_deployment` writes for a model named ``name`` (a file name or an
    architecture: its :func:`safe_stem`): ``"m1"``, then each format's (the float file first where a
    quantiser needs it, :func:`list_deploy_formats` when ``formats`` is ``None``), then ``"result"``,
    the ``.json`` (moved last). The command line declares them to its guard before any work.

    Raises:
        DeepFaultError: An unknown format, or none.
    """
    stem = f"deploy-{safe_stem(name)}"
    out = Path(out_dir)
    files = {"m1": out / f"{stem}-m1.pt"}
    files.update({f: out / f"{stem}-{DEPLOY_FORMATS.get(f)[0]}" for f in _checked_formats(formats)})
    files["result"] = out / f"{stem}.json"
    return files


def _calibration_sample(d, count: int, seed: int) -> np.ndarray:
    """A seeded sample of ``count`` training inputs (test inputs when there are none), in order."""
    rng = np.random.default_rng(seed)
    pool = d.x_train if len(d.x_train) else d.x_test
    return pool[np.sort(rng.permutation(len(pool))[:count])]


def _deployable(model, data, data_dir):
    """The prepared model with its data set, refused when it is a black box or has no data."""
    from .blackbox import is_black_box
    from .prepare import prepare_model

    pm = prepare_model(model, data, data_dir=data_dir)
    if is_black_box(pm.module):
        raise DeepFaultError("the deployment scenario exports a torch model; this one is a black box already")
    if pm.data is None:
        raise DeepFaultError("the model names no data set; give one (--dataset NAME)")
    return pm


def _checked_formats(formats: Sequence[str] | None) -> list[str]:
    """The formats to write (names, or comma-separated text; default: all; the float ONNX file
    first where a quantiser needs it), refusing an unknown one or none.
    """
    if isinstance(formats, str):
        formats = [f.strip() for f in formats.split(",") if f.strip()]
    formats = list(formats) if formats is not None else list_deploy_formats()
    unknown = [f for f in formats if f not in DEPLOY_FORMATS]
    if unknown or not formats:
        hint = suggestion(unknown[0], list_deploy_formats()) if unknown else ""
        raise DeepFaultError(f"unknown deployment format(s) {', '.join(unknown) or '(none given)'}{hint}; "
                             "known: "
                             f"{', '.join(list_deploy_formats())}")
    if any(f in ("onnx-int8", "onnx-int8-static") for f in formats) and "onnx" not in formats:
        formats = ["onnx", *formats]  # the quantisers start from the float file
    return formats


def _save_m1(pm, path: Path) -> Path | None:
    """Save M1, the prepared model's file with its data set, range and role, at ``path``
    (``None``: a caller's bare module has no architecture to save it under; ``path``, the unit's
    temporary, is removed, so that nothing is moved into place).
    """
    from .io import ModelFile, save_model

    if pm.model_file is None:
        path.unlink(missing_ok=True)
        return None
    mf1, d = pm.model_file, pm.data
    save_model(path, ModelFile(model=mf1.model, arch=mf1.arch, arch_kwargs=dict(mf1.arch_kwargs),
                               dataset=d.name, bounds=(float(d.bounds[0]), float(d.bounds[1])),
                               output_kind=pm.output_kind, meta={**mf1.meta, "deployment": {"role": "M1"}}))
    return path


def _probabilities(outputs: torch.Tensor, output_kind: str) -> np.ndarray:
    """Class probabilities from a model's outputs (a softmax over logits)."""
    return torch.softmax(outputs, 1).numpy() if output_kind == "logits" else outputs.numpy()


@dataclass(frozen=True)
class _Exports:
    """Where and from what :func:`make_deployment` exports (``paths``: the unit's temporaries, by
    format; ``files``: where they are moved), and how one export is compared with M1.
    """

    module: nn.Module
    paths: dict[str, Path]
    files: dict[str, Path]
    calibration: np.ndarray

    def compare_all(self, formats: Sequence[str], d, p1: np.ndarray) -> dict[str, dict]:
        """:meth:`compare` for each format: ``{key: {format: value}}``."""
        result: dict[str, dict] = {k: {} for k in ("files", "accuracy", "regressions", "fixes", "agreement",
                                                   "max_abs_diff", "details")}
        for fmt in formats:
            for key, value in self.compare(fmt, d, p1).items():
                result[key][fmt] = value
        return result

    def compare(self, fmt: str, d, p1: np.ndarray) -> dict[str, object]:
        """Export ``fmt``, run it on the test inputs and compare its answers with M1's ``p1``."""
        from .blackbox import open_onnxruntime

        _, exporter = DEPLOY_FORMATS.get(fmt)
        path = self.paths[fmt]
        details = exporter(self.module, path, torch.as_tensor(d.x_test[:2]),
                           float_path=self.paths.get("onnx"), calibration=self.calibration)
        mf = open_onnxruntime(path)
        p2 = _probabilities(mf.model(torch.as_tensor(d.x_test)), mf.output_kind)
        right1, right2 = p1.argmax(1) == d.y_test, p2.argmax(1) == d.y_test
        return {"files": self.files[fmt], "accuracy": float(right2.mean()),
                "regressions": int((right1 & ~right2).sum()), "fixes": int((~right1 & right2).sum()),
                "agreement": float((p1.argmax(1) == p2.argmax(1)).mean()),
                "max_abs_diff": float(np.abs(p1 - p2).max()), "details": details}
