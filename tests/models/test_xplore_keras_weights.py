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
