"""Black-box models: an ONNX file run by ONNX Runtime, a ``.tflite`` file run by LiteRT, or any
Python callable from a batch of inputs to class scores.

A black box is known by its outputs only. :class:`BlackBoxModel` wraps one as an ``nn.Module``
without layers or parameters, so whatever takes a module (the regression campaign's
:class:`~deepfault.fuzz.campaign.execution.ModelPair`, :func:`~.prepare.prepare_model`'s
layout adapter and range checks) takes it unchanged: ``forward`` sends the batch to the CPU as a
NumPy array in the dtype the file asks for, runs the runtime in batches, and returns float32
scores on the input's device. Methods that need a model's neurons or gradients cannot use a
black box and say so (:func:`is_black_box`).

The module holds one buffer, ``blackbox_digest``: the SHA-256 of the file's bytes (of the
callable's qualified name and ``key`` for a callable), so the model's
:func:`~.fingerprint.fingerprint` tells two files apart and a results store keys their
campaigns apart.

| what | runtime | extra |
| --- | --- | --- |
| ``.onnx`` (``runtime="onnxruntime"``, or ``"auto"`` and no onnx2torch) | ONNX Runtime | ``runtime`` |
| ``.tflite`` | the LiteRT interpreter (``ai_edge_litert``) | ``litert`` |
| a callable ``f(np.ndarray) -> np.ndarray`` (:func:`black_box`) | itself | none |

Examples:
    >>> import numpy as np
    >>> mf = black_box(lambda x: x.reshape(len(x), -1)[:, :3], input_shape=(1, 2, 2))
    >>> mf.model(torch.ones(2, 1, 2, 2)).shape
    torch.Size([2, 3])
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import DeepFaultError
from .io import ModelFile

__all__ = ["BlackBoxModel", "RUNTIMES", "black_box", "describe_black_box", "is_black_box", "open_litert",
           "onnx_input_type", "open_onnxruntime", "outputs_only", "unwrap_black_box", "RUNTIME_HELP"]

log = logging.getLogger(__name__)

#: How ``--runtime`` runs an ``.onnx`` file: ``auto`` (onnx2torch when it converts the graph,
#: else ONNX Runtime), ``torch`` (onnx2torch: a white box) or ``onnxruntime`` (a black box).
RUNTIMES = ("auto", "torch", "onnxruntime")
#: ``--runtime``'s help: what each of :data:`RUNTIMES` means for a file and what a black box lacks.
RUNTIME_HELP = (
    "how .onnx files run: auto (onnx2torch, or ONNX Runtime for a graph it cannot convert, e.g. int8 or "
    "float16), torch (onnx2torch only) or onnxruntime (the deployed runtime, a black box: no neurons for "
    "--strategy deephunter, no activations of M1 for --fidelity dsa/lsa/mdsa). .tflite files always run in "
    "LiteRT")

#: Inputs per runtime call when the file allows any batch size (a black-box runtime's batch
#: cap; not the bound of the batch-size options, :data:`deepfault.checks.MAX_INPUTS`).
MAX_RUNTIME_BATCH = 4096

#: ONNX operators whose result for one input depends on the other inputs of the batch
#: (dynamic quantisation's scale is the min/max over the whole tensor): such a graph runs one
#: input per call, as it runs when deployed, so a fault found in a batch is a fault alone too.
BATCH_COUPLED_OPS = ("DynamicQuantizeLinear",)


@dataclass(frozen=True)
class _IO:
    """One tensor of a black box: its name, per-input shape (``None``: any), dtype and, for an
    integer tensor of a quantised LiteRT model, ``(scale, zero_point)``.
    """

    name: str
    shape: tuple[int | None, ...]
    batch: int | None  # the file's fixed batch size (None: any)
    dtype: np.dtype
    quantization: tuple[float, int] | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": ["N" if self.batch is None else self.batch, *(
            "?" if d is None else d for d in self.shape)], "dtype": str(self.dtype),
            **({"quantization": {"scale": self.quantization[0], "zero_point": self.quantization[1]}}
               if self.quantization else {})}


class BlackBoxModel(nn.Module):
    """A model known by its outputs only, as a layerless ``nn.Module`` (see the module docstring).

    Args:
        predict: ``predict(x) -> scores``: ``x`` a NumPy array ``(n, *input_shape)`` in
            ``input.dtype``, the scores ``(n, classes)``.
        runtime: What runs it (``onnxruntime``, ``litert``, ``callable``), for messages.
        digest: 32 bytes identifying the model (the file's SHA-256).
        source: The file (or the callable's name), for messages.
        input: The input tensor's description (``None``: float32, any shape and batch).
        output: The output tensor's description, for ``deepfault inspect``.
        max_batch: Inputs per call.
    """

    def __init__(self, predict: Callable[[np.ndarray], np.ndarray], *, runtime: str, digest: bytes,
                 source: str, input: _IO | None = None, output: _IO | None = None,
                 max_batch: int = MAX_RUNTIME_BATCH):
        super().__init__()
        self.predict_fn = predict
        self.runtime, self.source = runtime, source
        self.input_io = input or _IO("input", (), None, np.dtype(np.float32))
        self.output_io = output
        self.max_batch = int(self.input_io.batch or max_batch)
        self.register_buffer("blackbox_digest", torch.frombuffer(bytearray(digest), dtype=torch.uint8))
        self.declared_logits = False  # set by black_box(): warn once if the scores look like probabilities

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device = x.device
        arr = x.detach().to("cpu", torch.float32).numpy()
        outs = [self._call(arr[i:i + self.max_batch]) for i in range(0, len(arr), self.max_batch)]
        out = np.concatenate(outs) if outs else np.zeros((0, 0), np.float32)
        if self.declared_logits and len(out):
            self.declared_logits = False
            if out.min() >= 0 and np.allclose(out.sum(1), 1.0, atol=1e-3):
                warnings.warn(f"{self.source} returns rows that sum to 1 but is declared to return logits; "
                              "pass output_kind='probabilities'", stacklevel=2)
        return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32)).to(device)

    def _call(self, x: np.ndarray) -> np.ndarray:
        io = self.input_io
        n = len(x)
        if io.batch is not None and n < io.batch:  # a fixed batch: pad the last chunk
            x = np.concatenate([x, np.repeat(x[-1:], io.batch - n, axis=0)])
        if io.quantization is not None:
            scale, zero = io.quantization
            info = np.iinfo(io.dtype)
            x = np.clip(np.round(x / scale + zero), info.min, info.max)
        out = np.asarray(self.predict_fn(x.astype(io.dtype, copy=False)))
        if self.output_io is not None and self.output_io.quantization is not None:
            scale, zero = self.output_io.quantization
            out = (out.astype(np.float32) - zero) * scale
        if out.ndim != 2 or len(out) < n:
            raise DeepFaultError(f"{self.source} ({self.runtime}) returned scores of shape {out.shape} for "
                                 f"{len(x)} inputs; a classifier returns (inputs, classes)")
        return out[:n].astype(np.float32, copy=False)

    def extra_repr(self) -> str:
        return f"runtime={self.runtime!r}, source={self.source!r}"

    def __deepcopy__(self, memo):  # a runtime session cannot be copied, and need not be: no state changes
        return self


def unwrap_black_box(module: nn.Module) -> BlackBoxModel | None:
    """The :class:`BlackBoxModel` inside ``module`` (itself or under an input adapter), else ``None``."""
    inner = getattr(module, "inner", module)
    return inner if isinstance(inner, BlackBoxModel) else None


def is_black_box(model: Any) -> bool:
    """Whether ``model`` (a module, :class:`~.prepare.PreparedModel` or :class:`ModelFile`) is a black box."""
    for attr in ("module", "model"):  # a PreparedModel, a ModelFile
        inner = getattr(model, attr, None)
        if isinstance(inner, nn.Module):
            model = inner
            break
    return isinstance(model, nn.Module) and unwrap_black_box(model) is not None


def outputs_only(model: Any) -> bool:
    """Whether only ``model``'s outputs can be read: a black box, or TorchScript with compiled code
    (gradients flow there, but no forward hook reaches a neuron).
    """
    from ..core.capture import is_compiled

    for attr in ("module", "model"):  # a PreparedModel, a ModelFile
        inner = getattr(model, attr, None)
        if isinstance(inner, nn.Module):
            model = inner
            break
    return is_black_box(model) or (isinstance(model, nn.Module) and is_compiled(model))


def describe_black_box(module: nn.Module) -> dict:
    """How a black box is read: ``{"runtime", "source", "input", "output"}`` (plain values)."""
    box = unwrap_black_box(module)
    if box is None:
        raise DeepFaultError("not a black-box model")
    return {"runtime": box.runtime, "source": box.source, "input": box.input_io.to_dict(),
            "output": None if box.output_io is None else box.output_io.to_dict()}


def _file_digest(path: Path) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.digest()


def _split_shape(dims) -> tuple[int | None, tuple[int | None, ...]]:
    """``(batch, per-input shape)`` of a runtime's shape (strings, ``None``, 0 or -1: any size)."""
    sizes = [d if isinstance(d, (int, np.integer)) and d > 0 else None for d in dims]
    if not sizes:
        return None, ()
    rest = tuple(None if d is None else int(d) for d in sizes[1:])
    return (None if sizes[0] is None else int(sizes[0])), rest


def _threads() -> int:
    return max(1, torch.get_num_threads())


# --------------------------------------------------------------------------- ONNX Runtime


_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


def _ort():
    try:
        import onnxruntime
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError("running an ONNX file in ONNX Runtime needs onnxruntime; install the "
                                  "extra: pip install -e '.[runtime]'") from err
    return onnxruntime


def _probe(path: Path, runtime: str, make, fix: str):
    """``make()``: a runtime's first look at the file, any failure one line that says what to do."""
    try:
        return make()
    except Exception as err:  # noqa: BLE001 - runtimes raise their own types (Fail, InvalidGraph, ...)
        first = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise DeepFaultError(f"{runtime} cannot open {str(path)!r}: {first}; {fix}") from err


def _check_classifier_io(path: Path, ins, outs) -> None:
    if len(ins) != 1 or not outs:
        raise DeepFaultError(f"{str(path)!r} has {len(ins)} inputs and {len(outs)} outputs; a classifier "
                             "takes one input and returns its class scores first")


def open_onnxruntime(path: str | os.PathLike) -> ModelFile:
    """An ``.onnx`` classifier run by ONNX Runtime on the CPU, as a black-box :class:`ModelFile`.

    The session uses as many threads as torch (``--threads``) and is made on first use, so a
    thread count set after opening applies. The output kind is ``probabilities`` when the
    graph's output comes from a Softmax node.

    Raises:
        DeepFaultError: A missing or invalid file, or inputs that are not floating point.
        ModuleNotFoundError: onnxruntime is not installed (extra ``runtime``).
    """
    path = Path(path)
    if not path.is_file():
        raise DeepFaultError(f"ONNX file {str(path)!r} does not exist; check the path")
    ort = _ort()
    probe = _probe(path, "ONNX Runtime",
                   lambda: ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]),
                   "re-export the model or check that the file is complete")
    ins, outs = probe.get_inputs(), probe.get_outputs()
    _check_classifier_io(path, ins, outs)
    if ins[0].type not in _ORT_TYPES:
        raise DeepFaultError(f"{str(path)!r} takes {ins[0].type} inputs; deepfault feeds float inputs "
                             "(export the model with a float input)")
    batch, shape = _split_shape(ins[0].shape)
    obatch, oshape = _split_shape(outs[0].shape)
    inp = _IO(ins[0].name, shape, batch, np.dtype(_ORT_TYPES[ins[0].type]))
    out = _IO(outs[0].name, oshape, obatch, np.dtype(_ORT_TYPES.get(outs[0].type, np.float32)))
    del probe
    lock = threading.Lock()
    session: list = []

    def predict(x: np.ndarray) -> np.ndarray:
        if not session:
            with lock:
                if not session:
                    options = ort.SessionOptions()
                    options.intra_op_num_threads = _threads()
                    options.inter_op_num_threads = 1
                    options.log_severity_level = 3
                    session.append(ort.InferenceSession(str(path), options,
                                                        providers=["CPUExecutionProvider"]))
        return session[0].run([out.name], {inp.name: x})[0]

    last, ops = _onnx_last_op(path), _onnx_ops(path)
    # DynamicQuantizeLinear scales the activations over the whole tensor, the batch included: an
    # input's scores would depend on the other inputs of its batch. Run one at a time, as deployed.
    per_input = any(op in ops for op in BATCH_COUPLED_OPS)
    model = BlackBoxModel(predict, runtime="onnxruntime", digest=_file_digest(path), source=str(path),
                          input=inp, output=out, max_batch=1 if per_input else MAX_RUNTIME_BATCH)
    return ModelFile(model=model, arch="onnxruntime",
                     output_kind="probabilities" if last == "Softmax" else "logits",
                     meta={"input_shape": list(shape) if shape else None, "source": str(path),
                           "runtime": "onnxruntime", "black_box": True, "graph_ops": ops,
                           "one_input_per_call": per_input})


def _onnx_proto(path: Path):
    try:
        import onnx
    except ModuleNotFoundError:
        return None
    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - ORT opened it; the summary is optional
        return None


def onnx_input_type(path: str | os.PathLike) -> str | None:
    """The NumPy dtype name of an ONNX graph's first input (``None`` when onnx cannot tell)."""
    proto = _onnx_proto(Path(path))
    if proto is None or not proto.graph.input:
        return None
    from onnx import helper

    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(proto.graph.input[0].type.tensor_type.elem_type)))
    except Exception:  # noqa: BLE001 - an unusual type: let the loaders say what is wrong
        return None


def _onnx_last_op(path: Path) -> str:
    """The op type of the node that makes the graph's first output ('' when unknown)."""
    proto = _onnx_proto(path)
    if proto is None or not proto.graph.output:
        return ""
    name = proto.graph.output[0].name
    ops = [n.op_type for n in proto.graph.node if name in n.output]
    return ops[-1] if ops else ""


def _onnx_ops(path: Path) -> dict[str, int]:
    """How many nodes of each op type the graph has (for ``inspect`` and results)."""
    proto = _onnx_proto(path)
    counts: dict[str, int] = {}
    for node in proto.graph.node if proto is not None else ():
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


# --------------------------------------------------------------------------- LiteRT


def _litert_interpreter():
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError("running a .tflite file needs the LiteRT interpreter (ai-edge-litert); "
                                  "install the extra: pip install -e '.[litert]'") from err
    return Interpreter


#: What LiteRT's C++ logger writes to the process's standard error when it applies its default
#: delegate (once per process, at the first ``allocate_tensors``): an INFO line with no Python
#: switch, printed even before a one-line error (issue 43).
_LITERT_NOTICE = b"INFO: Created TensorFlow Lite XNNPACK delegate"


@contextmanager
def _litert_quietly() -> Iterator[None]:
    """Run the block with the process's standard error (file descriptor 2) caught, then copy
    back every line but LiteRT's delegate notice (:data:`_LITERT_NOTICE`): anything else the
    block or another thread wrote is kept, only later.
    """
    import tempfile

    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no standard error to catch
        saved = None
    if saved is None:
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            lines = caught.read().splitlines(keepends=True)
            kept = [line for line in lines if not line.startswith(_LITERT_NOTICE)]
            if kept:
                os.write(2, b"".join(kept))


def _litert_io(detail: dict) -> _IO:
    batch, shape = _split_shape([int(d) for d in detail.get("shape_signature", detail["shape"])])
    dtype = np.dtype(detail["dtype"])
    scale, zero = detail.get("quantization", (0.0, 0))
    quant = (float(scale), int(zero)) if np.issubdtype(dtype, np.integer) and scale else None
    return _IO(detail["name"], shape, batch, dtype, quant)


def _litert_last_op(probe, output: int) -> str:
    """The name of the operator that produces tensor ``output`` (``""`` when unknown)."""
    try:
        producers = [o for o in probe._get_ops_details()  # a delegate's node stands beside the originals
                     if o["op_name"] != "DELEGATE" and output in list(o["outputs"])]
        return str(producers[-1]["op_name"]).upper() if producers else ""
    except Exception:  # noqa: BLE001 - a private helper: the output kind then defaults to logits
        return ""


class _LiteRTRunner:
    """A LiteRT model's ``predict``: one interpreter, made at the first call, its input resized
    to each new batch size, running one batch at a time.
    """

    def __init__(self, interpreter_cls, path: Path, input_index: int, output_index: int):
        self.interpreter_cls, self.path = interpreter_cls, path
        self.input_index, self.output_index = input_index, output_index
        self.lock = threading.Lock()
        self.interpreter: Any = None
        self.batch: int | None = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        with self.lock:  # an interpreter runs one batch at a time
            if self.interpreter is None:
                self.interpreter = self.interpreter_cls(model_path=str(self.path), num_threads=_threads())
                self.batch = None
            it = self.interpreter
            if self.batch != len(x):
                it.resize_tensor_input(self.input_index, [len(x), *x.shape[1:]], strict=False)
                with _litert_quietly():
                    it.allocate_tensors()
                self.batch = len(x)
            it.set_tensor(self.input_index, np.ascontiguousarray(x))
            it.invoke()
            return np.array(it.get_tensor(self.output_index))

    def __deepcopy__(self, memo) -> _LiteRTRunner:
        return self  # a copied model shares the interpreter, as a copied function would


def open_litert(path: str | os.PathLike) -> ModelFile:
    """A ``.tflite`` classifier run by the LiteRT interpreter, as a black-box :class:`ModelFile`.

    A model with a fixed batch size gets its batch resized to the campaign's where the
    interpreter allows it, else runs in chunks of its own size. A fully integer model's int8 or
    uint8 input is quantised with the file's scale and zero point and its output dequantised.
    The output kind is ``probabilities`` when the last operator is a softmax.

    Raises:
        DeepFaultError: A missing or invalid file, or more than one input.
        ModuleNotFoundError: ai-edge-litert is not installed (extra ``litert``).
    """
    path = Path(path)
    if not path.is_file():
        raise DeepFaultError(f"TFLite file {str(path)!r} does not exist; check the path")
    interpreter_cls = _litert_interpreter()

    def allocated():
        interpreter = interpreter_cls(model_path=str(path))
        with _litert_quietly():
            interpreter.allocate_tensors()
        return interpreter

    probe = _probe(path, "LiteRT", allocated, "check that it is a complete .tflite file")
    ins, outs = probe.get_input_details(), probe.get_output_details()
    _check_classifier_io(path, ins, outs)
    inp, out = _litert_io(ins[0]), _litert_io(outs[0])
    if not (np.issubdtype(inp.dtype, np.floating) or inp.quantization is not None):
        raise DeepFaultError(f"{str(path)!r} takes {inp.dtype} inputs without a quantisation scale; "
                             "deepfault feeds float inputs")
    last = _litert_last_op(probe, outs[0]["index"])
    fixed = int(ins[0]["shape"][0]) if len(ins[0]["shape"]) else 1
    del probe
    predict = _LiteRTRunner(interpreter_cls, path, ins[0]["index"], outs[0]["index"])
    resizable = _resizable(interpreter_cls, path, ins[0], fixed)
    inp = _IO(inp.name, inp.shape, None if resizable else fixed, inp.dtype, inp.quantization)
    model = BlackBoxModel(predict, runtime="litert", digest=_file_digest(path), source=str(path),
                          input=inp, output=out)
    kind = "probabilities" if last == "SOFTMAX" else "logits"
    return ModelFile(model=model, arch="litert", output_kind=kind,
                     meta={"input_shape": list(inp.shape) if inp.shape else None, "source": str(path),
                           "runtime": "litert", "black_box": True, "batch_resizable": resizable})


def _resizable(interpreter_cls, path: Path, detail: dict, fixed: int) -> bool:
    """Whether the interpreter runs the model on a batch of another size than the file's."""
    try:
        it = interpreter_cls(model_path=str(path))
        shape = [fixed + 1, *[int(d) for d in detail["shape"][1:]]]
        it.resize_tensor_input(detail["index"], shape, strict=False)
        with _litert_quietly():
            it.allocate_tensors()
        it.set_tensor(detail["index"], np.zeros(shape, dtype=detail["dtype"]))
        it.invoke()
        out = it.get_output_details()[0]
        return int(it.get_tensor(out["index"]).shape[0]) == fixed + 1
    except Exception:  # noqa: BLE001 - any refusal means: keep the file's batch
        return False


# --------------------------------------------------------------------------- a callable


def black_box(predict: Callable[[np.ndarray], Any], *, output_kind: str = "logits",
              input_shape: tuple[int, ...] | None = None, name: str | None = None, key: str = "",
              max_batch: int = MAX_RUNTIME_BATCH) -> ModelFile:
    """Any Python callable from a batch of inputs to class scores, as a black-box :class:`ModelFile`.

    Args:
        predict: ``predict(x) -> scores``: ``x`` a float32 NumPy array ``(n, *input_shape)`` in
            the data set's native layout and range, the scores ``(n, classes)`` (array-like).
        output_kind: ``"logits"`` or ``"probabilities"`` (a warning says when rows that sum to 1
            are declared logits).
        input_shape: Per-input shape, when it differs from the data set's (an adapter converts).
        name: The model's name in results (default: the callable's qualified name).
        key: Tells two callables of the same name apart in a results store (a version, a URL).
        max_batch: Inputs per call, 1 to 1,048,576.

    Returns:
        A :class:`ModelFile` whose model is a :class:`BlackBoxModel`.

    Examples:
        >>> w = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
        >>> mf = black_box(lambda x: x.reshape(len(x), -1) @ w, input_shape=(4,))
        >>> mf.model(torch.ones(5, 4)).shape, mf.output_kind
        (torch.Size([5, 3]), 'logits')
    """
    if not callable(predict):
        raise DeepFaultError("a black-box model is a callable from inputs to scores; "
                             f"got {type(predict).__name__}")
    if output_kind not in ("logits", "probabilities"):
        raise DeepFaultError(f"output_kind must be 'logits' or 'probabilities'; got {output_kind!r}")
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or not 1 <= max_batch <= 1 << 20:
        raise DeepFaultError(f"max_batch must be an int from 1 to 1048576; got {max_batch!r}")
    label = name or getattr(predict, "__qualname__", None) or type(predict).__name__
    ident = f"{getattr(predict, '__module__', '')}.{label}|{key}"
    shape = tuple(input_shape) if input_shape is not None else ()
    model = BlackBoxModel(lambda x: np.asarray(predict(x)), runtime="callable",
                          digest=hashlib.sha256(ident.encode()).digest(), source=label,
                          input=_IO("input", shape, None, np.dtype(np.float32)), max_batch=max_batch)
    model.declared_logits = output_kind == "logits"
    return ModelFile(model=model, arch="callable", output_kind=output_kind,
                     meta={"input_shape": list(shape) if input_shape is not None else None, "source": label,
                           "runtime": "callable", "black_box": True})
