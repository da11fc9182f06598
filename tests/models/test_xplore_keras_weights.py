"""Keras ``save_weights`` files into zoo LeNets (DeepXplore's published MNIST weights)."""

import numpy as np
import pytest
import torch

from deepfault.errors import DeepFaultError
from deepfault.models.keras_weights import is_weights_only, open_keras_weights, read_keras_weights
from deepfault.models.zoo import build_model
from helpers.keras_files import keras_arrays as _keras_arrays
from helpers.keras_files import write_save_weights as _write_save_weights

h5py = pytest.importorskip("h5py")


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
    assert mf.arch == arch
    assert mf.meta["input_shape"] == [1, 28, 28]
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
    from helpers.keras_files import layer

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


@pytest.mark.parametrize(("arch", "neurons"), [("lenet1", 52), ("lenet4", 148), ("lenet5", 268)])
def test_deepxplore_layers_of_keras_imports_and_zoo_lenets(tmp_path, arch, neurons):
    """Every layer but input and flatten, activated: DeepXplore's 52/148/268 neurons, with the
    Keras import's own softmax as the softmax layer (not a softmax of its probabilities)."""
    from deepfault.core.capture import _resolve, capture
    from deepfault.models import open_model
    from helpers.keras_files import functional_config, write_full

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
