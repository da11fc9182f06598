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


def _deepxplore_keras_lenet(arch: str, rng) -> tuple[list[dict], dict]:
    """DeepXplore's Keras LeNet (``Model1`` .. ``Model3`` in its MNIST code) as a layer list
    and random weights: fused-ReLU convolutions, max pooling, flatten, dense, logits named
    ``before_softmax`` and ``Activation('softmax')`` named ``predictions``."""
    from test_keras_import import layer

    c1, c2 = (4, 12) if arch == "lenet1" else (6, 16)
    hidden = {"lenet1": [], "lenet4": [84], "lenet5": [120, 84]}[arch]
    conv = {"kernel_size": [5, 5], "activation": "relu", "padding": "same"}
    layers = [layer("Conv2D", "block1_conv1", filters=c1, **conv),
              layer("MaxPooling2D", "block1_pool1", pool_size=[2, 2]),
              layer("Conv2D", "block2_conv1", filters=c2, **conv),
              layer("MaxPooling2D", "block2_pool1", pool_size=[2, 2]), layer("Flatten", "flatten")]
    layers += [layer("Dense", f"fc{i + 1}", units=u, activation="relu") for i, u in enumerate(hidden)]
    layers += [layer("Dense", "before_softmax", units=10),
               layer("Activation", "predictions", activation="softmax")]
    weights, fan_in = {}, 1
    shapes = [("block1_conv1", (5, 5, 1, c1)), ("block2_conv1", (5, 5, c1, c2))]
    widths = [c2 * 7 * 7, *hidden, 10]
    shapes += [(n, (a, b)) for n, a, b in zip([f"fc{i + 1}" for i in range(len(hidden))] + ["before_softmax"],
                                              widths[:-1], widths[1:], strict=True)]
    for name, shape in shapes:
        fan_in = int(np.prod(shape[:-1]))
        weights[name] = [("kernel", rng.normal(0, fan_in ** -0.5, shape).astype(np.float32)),
                         ("bias", np.zeros(shape[-1], np.float32))]
    return layers, weights


@pytest.mark.parametrize("arch, neurons", [("lenet1", 52), ("lenet4", 148), ("lenet5", 268)])
def test_deepxplore_layers_of_keras_imports_and_zoo_lenets(tmp_path, arch, neurons):
    """Every layer but input and flatten, activated: DeepXplore's 52/148/268 neurons, with the
    Keras import's own softmax as the softmax layer (not a softmax of its probabilities)."""
    from deepfault.core.capture import _resolve, capture
    from deepfault.models import open_model
    from test_keras_import import functional_config, write_full

    layers, weights = _deepxplore_keras_lenet(arch, np.random.default_rng(0))
    mf = open_model(write_full(tmp_path / "m.h5", functional_config(layers, [28, 28, 1]), weights))
    keras_names = [entry["config"]["name"] for entry in layers if entry["class_name"] != "Flatten"]
    names, _ = _resolve(mf.model, "deepxplore")
    assert names == [n + "_act" if n.endswith("conv1") or n.startswith("fc") else n for n in keras_names]
    x = torch.rand(3, 28, 28, 1)
    with torch.no_grad(), capture(mf.model, "deepxplore") as rec:
        probabilities = mf.model(x)
        values = rec.collect()
    assert values.shape == (3, neurons)
    torch.testing.assert_close(values[:, -10:], probabilities)
    zoo = build_model(arch)
    with torch.no_grad(), capture(zoo, "deepxplore") as rec:
        logits = zoo(torch.rand(3, 1, 28, 28))
        values = rec.collect()
    assert values.shape == (3, neurons)
    torch.testing.assert_close(values[:, -10:], torch.softmax(logits, 1))
    assert _resolve(zoo, "deepxplore")[0][-2:] == ["before_softmax", "softmax(output)"]
