"""Random hit spectra of a given layer layout, for the selection and measure tests."""

import numpy as np

from deepfault.core.capture import NeuronLayout
from deepfault.localization.spectrum import Spectrum


def make_spectrum(sizes=(3, 4, 2), seed=0, failed=5, passed=7):
    layout = NeuronLayout.from_sizes([f"l{i}" for i in range(len(sizes))], sizes)
    rng = np.random.default_rng(seed)
    m = layout.num_neurons
    a_s = rng.integers(0, passed + 1, m)
    a_f = rng.integers(0, failed + 1, m)
    return Spectrum(layout, a_s, a_f, passed - a_s, failed - a_f)
