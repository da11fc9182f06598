"""Keras ``save_weights`` files into zoo LeNets (DeepXplore's published MNIST weights)."""

import numpy as np
import pytest
import torch

from deepfault.errors import DeepFaultError
from deepfault.models.keras_weights import is_weights_only, open_keras_weights, read_keras_weights
from deepfault.models.zoo import build_model

h5py = pytest.importorskip("h5py")


def _keras_arrays(model: torch.nn.Module, hwc=(7, 7)) -> list[tuple[str, list[tuple[str, np.ndarray]]]]:
    """Each Conv2d/Linear's weights laid out as Keras stores them, written from the formulas:
    conv kernel[kh, kw, i, o] = W[o, i, kh, kw]; dense kernel[i, o] = W[o, i], where for the
    dense layer after Flatten the Keras row of (h, w, c) is (h * W + w) * C + c and the torch
    column is c * H * W + h * W + w."""
    out = []
    first_dense = True
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Conv2d):
            w = m.weight.detach().numpy()
            k = np.zeros((w.shape[2], w.shape[3], w.shape[1], w.shape[0]), np.float32)
            for o in range(w.shape[0]):
                for i in range(w.shape[1]):
                    k[:, :, i, o] = w[o, i]
            out.append((name, [("kernel", k), ("bias", m.bias.detach().numpy())]))
        elif isinstance(m, torch.nn.Linear):
            w = m.weight.detach().numpy()
            k = w.T.copy()
            if first_dense:
                hh, ww = hwc
                c = w.shape[1] // (hh * ww)
                k = np.zeros_like(k)
                for h in range(hh):
                    for x in range(ww):
                        for ch in range(c):
                            k[(h * ww + x) * c + ch] = w[:, ch * hh * ww + h * ww + x]
                first_dense = False
            out.append((name, [("kernel", k), ("bias", m.bias.detach().numpy())]))
    return out


def _write_save_weights(path, layers, *, extra_layers=("block1_pool1", "flatten"), full_model=False):
    """An HDF5 file in Keras 2's save_weights layout (layer groups with nested datasets)."""
    with h5py.File(path, "w") as f:
        root = f.create_group("model_weights") if full_model else f
        names = [n for n, _ in layers] + list(extra_layers)
        root.attrs["layer_names"] = np.array([n.encode() for n in names])
        root.attrs["backend"] = b"tensorflow"
        root.attrs["keras_version"] = b"2.0.8"
        for name, weights in layers:
            g = root.create_group(name)
            wn = [f"{name}/{w}:0".encode() for w, _ in weights]
            g.attrs["weight_names"] = np.array(wn)
            for (_, a), full in zip(weights, wn, strict=True):
                g.create_dataset(full.decode(), data=a)
        for name in extra_layers:
            root.create_group(name).attrs["weight_names"] = np.array([], dtype="S1")
        if full_model:
            f.attrs["model_config"] = b"{}"
    return path


@pytest.mark.parametrize("arch", ["lenet1", "lenet4", "lenet5"])
def test_keras_weights_reproduce_the_original_outputs(tmp_path, arch):
    torch.manual_seed(0)
    original = build_model(arch).eval()
    path = _write_save_weights(tmp_path / "Model.h5", _keras_arrays(original))
    assert is_weights_only(path)
    mf = open_keras_weights(path, arch=arch, input_shape=(1, 28, 28))
    x = torch.rand(16, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(mf.model(x), original(x), atol=1e-5, rtol=0)
    assert mf.arch == arch and mf.meta["input_shape"] == [1, 28, 28]
    inferred = open_keras_weights(path, arch=arch)  # square 7x7 maps inferred from the sizes
    with torch.no_grad():
        torch.testing.assert_close(inferred.model(x), original(x), atol=1e-5, rtol=0)


def test_full_model_files_keep_weights_under_model_weights(tmp_path):
    torch.manual_seed(0)
    original = build_model("lenet1").eval()
    path = _write_save_weights(tmp_path / "m.h5", _keras_arrays(original), full_model=True)
    assert not is_weights_only(path)  # it has an architecture: the Keras importer reads it
    layers, backend = read_keras_weights(path)
    assert [n for n, _ in layers] == ["block1_conv1", "block2_conv1", "before_softmax"]
    assert backend == "tensorflow"


def test_a_wrong_architecture_is_named(tmp_path):
    torch.manual_seed(0)
    path = _write_save_weights(tmp_path / "Model1.h5", _keras_arrays(build_model("lenet1")))
    with pytest.raises(DeepFaultError, match=r"has 3 layers with weights .* but the model has 4"):
        open_keras_weights(path, arch="lenet4", input_shape=(1, 28, 28))
    layers = _keras_arrays(build_model("lenet1"))
    layers[1] = ("block2_conv1", [("kernel", np.zeros((5, 5, 4, 6), np.float32)),
                                  ("bias", np.zeros(6, np.float32))])
    path = _write_save_weights(tmp_path / "bad.h5", layers)
    message = (r"Keras layer 'block2_conv1' weight 'kernel' has shape \(5, 5, 4, 6\) \(as torch "
               r"\(6, 4, 5, 5\)\), but module 'block2_conv1' needs weight of shape \(12, 4, 5, 5\)")
    with pytest.raises(DeepFaultError, match=message):
        open_keras_weights(path, arch="lenet1", input_shape=(1, 28, 28))


def test_not_a_weights_file(tmp_path):
    with pytest.raises(DeepFaultError, match="does not exist"):
        read_keras_weights(tmp_path / "missing.h5")
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    with pytest.raises(DeepFaultError, match="is not an HDF5 file"):
        read_keras_weights(tmp_path / "junk.h5")
    with h5py.File(tmp_path / "empty.h5", "w"):
        pass
    with pytest.raises(DeepFaultError, match="not a Keras save_weights file"):
        read_keras_weights(tmp_path / "empty.h5")
