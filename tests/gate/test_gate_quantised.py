"""A deployed int8 ONNX challenger running in ONNX Runtime as a black box: the gate's numbers
equal those computed from ONNX Runtime's own outputs with numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deepfault import Runtime
from deepfault.data import as_dataset
from deepfault.gate import GateConfig, gate
from helpers.gate_models import linear, split

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


@pytest.mark.parametrize("fmt", ["onnx-int8", "onnx-int8-static", "onnx-fp16"])
def test_the_deployed_pair_equals_onnx_runtime_and_numpy(tmp_path, fmt):
    from deepfault.models.deploy import make_deployment

    x, y = split(400, seed=3)
    data = as_dataset(x, y, name="gate-quantised")
    m1 = linear()
    deployed = make_deployment(m1, data, out_dir=tmp_path, formats=[fmt], name="lin")
    path = next(p for p in tmp_path.iterdir() if p.name.endswith(fmt.removeprefix("onnx-") + ".onnx"))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name, dtype = session.get_inputs()[0].name, np.float16 if "fp16" in fmt else np.float32
    # one input per call, as deepfault's ONNX Runtime black box runs it: dynamic int8 scales each
    # call's activations by that call's range, so the answer never depends on the batch size
    p2 = np.concatenate(
        [
            np.asarray(session.run(None, {name: x[i : i + 1].astype(dtype)})[0]).argmax(1)
            for i in range(len(x))
        ]
    )
    with torch.no_grad():
        p1 = m1(torch.as_tensor(x)).argmax(1).numpy()
    config = GateConfig(
        budget="0",
        max_negative_flip_rate="off",
        max_class_flip_rate="off",
        not_significantly_worse=False,
        max_disagreement_rate=0.1,
    )
    o = gate((m1, str(path)), data, config, runtime=Runtime(batch_size=50))
    h = o.heldout
    assert h.disagree == int((p1 != p2).sum())
    assert h.negative_flips == int(((p1 == y) & (p2 != y)).sum())
    assert h.positive_flips == int(((p1 != y) & (p2 == y)).sum())
    assert h.accuracy_m2 == pytest.approx(float((p2 == y).mean()))
    assert o.verdict == ("pass" if h.disagreement_rate <= 0.1 else "fail")
    assert deployed is not None
