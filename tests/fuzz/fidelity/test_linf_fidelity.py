"""The distance bound ``linf:T`` (any input shape, data units), the image-only checks refused for
vectors and sequences, and the default check of each kind of input."""

from __future__ import annotations

import pytest
import torch

from deepfault.errors import DeepFaultError
from deepfault.fuzz.fidelity import (
    LinfFidelity,
    check_fidelity_inputs,
    check_fidelity_spec,
    default_fidelity,
    make_fidelity,
)


@pytest.mark.parametrize("shape", [(6, 10), (6, 2, 9), (6, 1, 8, 8)])
def test_linf_matches_a_naive_loop_on_any_shape(shape):
    g = torch.Generator().manual_seed(0)
    roots = torch.rand(shape, generator=g) * 4 - 2  # data in (-2, 2)
    amount = torch.linspace(0.2, 1.2, shape[0]).view(-1, *[1] * (len(shape) - 1))  # per input
    mutants = roots + (torch.rand(shape, generator=g) - 0.5) * amount
    fid = make_fidelity("linf:0.3", bounds=(-2.0, 2.0))
    out = fid.check(mutants, fid.reference(roots))
    for i in range(shape[0]):
        pairs = zip(mutants[i].flatten(), roots[i].flatten(), strict=True)
        d = max(abs(float(a) - float(b)) for a, b in pairs)
        assert float(out.scores[i]) == pytest.approx(d, abs=1e-6)
        assert bool(out.passed[i]) == (d <= 0.3)
    assert out.passed.any()
    assert not out.passed.all()


def test_linf_default_is_a_tenth_of_the_range_and_bad_bounds_are_refused():
    assert make_fidelity("linf", bounds=(0.0, 255.0)).threshold == pytest.approx(25.5)
    assert make_fidelity("linf", bounds=(0.0, 1.0)).to_dict()["threshold"] == pytest.approx(0.1)
    for bad in ("linf:0", "linf:x", "linf:inf"):
        with pytest.raises(DeepFaultError, match="must be a finite number > 0"):
            check_fidelity_spec(bad)
    with pytest.raises(DeepFaultError, match="linf bound"):
        LinfFidelity(bounds=(0.0, 1.0), threshold=-1.0)


def test_image_only_checks_and_defaults_by_input_kind():
    assert default_fidelity("image") == "discriminator"
    assert default_fidelity("vector") == default_fidelity("sequence") == "mdsa"
    for spec in ("ssim", "ssim:0.9", "ssim-compat", "discriminator", "discriminator:d.pt"):
        check_fidelity_inputs(spec, "image")
        words = r"judges images only and the inputs are sequences; use one of dsa, linf, lsa, mdsa, none"
        with pytest.raises(DeepFaultError, match=words):
            check_fidelity_inputs(spec, "sequence")
    for spec in ("dsa:0.5", "mdsa", "lsa:p95", "linf:0.2", "none", None):
        check_fidelity_inputs(spec, "vector")
    ssim = make_fidelity("ssim", bounds=(0.0, 1.0))
    with pytest.raises(DeepFaultError, match=r"mutants must have shape \(B, C, H, W\)"):
        ssim.check(torch.rand(3, 10), torch.rand(3, 10))
    none = make_fidelity("none", bounds=(0.0, 1.0))
    assert none.passes(torch.rand(3, 10), none.reference(torch.rand(3, 10))).all()
