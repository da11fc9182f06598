"""Tiny ``.tflite`` files written by the tests: one FULLY_CONNECTED layer (float32 weights, or int8
weights with a per-tensor scale: LiteRT's hybrid "dynamic range" kernel), built with the
flatbuffer schema that ai-edge-litert ships, so no converter is needed."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_dense_tflite(path: Path, weight: np.ndarray, bias: np.ndarray, *, int8: bool = False,
                       batch: int = 1, input_shape: tuple[int, ...] | None = None,
                       softmax: bool = False) -> float:
    """Write ``y = x.reshape(n, -1) @ weight.T + bias`` (then softmax) for inputs of
    ``input_shape`` (default ``(F,)``), batch ``batch``. Returns the weights' int8 scale (0 for float).
    """
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    weight = np.asarray(weight, np.float32)
    classes, features = weight.shape
    shape = input_shape or (features,)
    scale = 0.0
    if int8:
        scale = float(np.abs(weight).max()) / 127.0
        wdata = np.clip(np.round(weight / scale), -127, 127).astype(np.int8).tobytes()
    else:
        wdata = weight.tobytes()

    def buffer(data: bytes = b""):
        b = s.BufferT()
        b.data = list(data) if data else None
        return b

    def tensor(name, shape_, ttype, buf, quant=None):
        t = s.TensorT()
        t.name, t.shape, t.type, t.buffer = name, list(shape_), ttype, buf
        t.shapeSignature = list(shape_)
        if quant is not None:
            q = s.QuantizationParametersT()
            q.scale, q.zeroPoint = [quant], [0]
            t.quantization = q
        return t

    model = s.ModelT()
    model.version = 3
    bdata = np.asarray(bias, np.float32).tobytes()
    model.buffers = [buffer(), buffer(), buffer(wdata), buffer(bdata), buffer()]
    g = s.SubGraphT()
    g.tensors = [
        tensor(b"input", (batch, *shape), s.TensorType.FLOAT32, 1),
        tensor(b"weight", (classes, features), s.TensorType.INT8 if int8 else s.TensorType.FLOAT32, 2,
               scale if int8 else None),
        tensor(b"bias", (classes,), s.TensorType.FLOAT32, 3),
        tensor(b"logits", (batch, classes), s.TensorType.FLOAT32, 4),
    ]
    fc = s.OperatorT()
    fc.opcodeIndex, fc.inputs, fc.outputs = 0, [0, 1, 2], [3]
    fc.builtinOptionsType = s.BuiltinOptions.FullyConnectedOptions
    opts = s.FullyConnectedOptionsT()
    opts.keepNumDims = False
    fc.builtinOptions = opts
    ops, codes = [fc], [s.BuiltinOperator.FULLY_CONNECTED]
    outputs = [3]
    if softmax:
        g.tensors.append(tensor(b"probabilities", (batch, classes), s.TensorType.FLOAT32, 0))
        sm = s.OperatorT()
        sm.opcodeIndex, sm.inputs, sm.outputs = 1, [3], [4]
        sm.builtinOptionsType = s.BuiltinOptions.SoftmaxOptions
        so = s.SoftmaxOptionsT()
        so.beta = 1.0
        sm.builtinOptions = so
        ops.append(sm)
        codes.append(s.BuiltinOperator.SOFTMAX)
        outputs = [4]
    g.inputs, g.outputs, g.operators = [0], outputs, ops
    model.subgraphs = [g]
    model.operatorCodes = []
    for code in codes:
        oc = s.OperatorCodeT()
        oc.builtinCode = code
        oc.deprecatedBuiltinCode = min(code, 127)
        oc.version = 1
        model.operatorCodes.append(oc)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    Path(path).write_bytes(bytes(builder.Output()))
    return scale
