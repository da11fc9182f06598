"""DRFuzz mutation rules (spec/drfuzz.md section 5): contract, ranges, identities, batching,
hand-checked cases and OpenCV's conventions checked against scipy.ndimage."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage

from deepfault.errors import DeepFaultError
from deepfault.fuzz.mutation import rules as mut
from deepfault.fuzz.mutation.rules import apply_rule, get_rule, list_rules, neutral_params, register_rule

RULES = [
    "translation", "scale", "shear", "rotation", "contrast", "brightness", "blur", "erode", "dilate",
    "reverse_patch", "white_patch", "black_patch", "gauss_noise", "multiplicative_noise", "salt_pepper",
]
AFFINE = ["rotation", "scale", "shear", "translation"]
WITH_NEUTRAL = [
    "translation", "scale", "shear", "rotation", "contrast", "brightness", "erode", "dilate",
    "gauss_noise", "multiplicative_noise",
]
KERNELS = {(1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (3, 1), (3, 3)}


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def images(n=6, c=1, h=28, w=28, seed=0, hi=1.0, dtype=torch.float32) -> torch.Tensor:
    return torch.rand(n, c, h, w, generator=gen(seed), dtype=dtype) * hi


def in_spec_range(name: str, p: dict, shape) -> None:
    """The parameters of ``name`` lie where spec section 5 puts them (literal numbers on purpose)."""
    n, _, h, w = shape
    if name == "translation":
        for key in ("dx", "dy"):
            assert set(p[key].tolist()) <= set(range(-3, 3))
    elif name == "scale":
        assert ((p["factor"] >= 0.7) & (p["factor"] <= 1.2)).all()
    elif name == "shear":
        assert ((p["factor"] >= -0.6) & (p["factor"] <= 0.6)).all()
    elif name == "rotation":
        assert ((p["angle"] >= -50) & (p["angle"] <= 50)).all()
    elif name == "contrast":
        assert ((p["alpha"] >= 0.5) & (p["alpha"] <= 1.5)).all()
    elif name == "brightness":
        assert ((p["beta"] >= -20) & (p["beta"] <= 20)).all()
    elif name == "blur":
        assert set(p["filter"].tolist()) <= set(range(9))
    elif name in ("erode", "dilate"):
        assert set(zip(p["kernel_h"].tolist(), p["kernel_w"].tolist(), strict=True)) <= KERNELS
    elif name.endswith("_patch"):
        assert ((p["row"] >= 0) & (p["row"] <= h - 2)).all()
        assert ((p["col"] >= 0) & (p["col"] <= w - 2)).all()
    elif name == "gauss_noise":
        assert set(p["var"].tolist()) <= {2, 1, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001}
        assert p["noise"].shape == shape
    elif name == "multiplicative_noise":
        assert set(p["var"].tolist()) <= {1, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001}
        assert p["noise"].shape == shape
    elif name == "salt_pepper":
        k = math.ceil(0.002 * h * w)
        assert p["salt"].shape == p["pepper"].shape == (n, k)
        both = torch.cat([p["salt"], p["pepper"]], dim=1)
        assert ((both >= 0) & (both < h * w)).all()
        assert all(len(set(row)) == 2 * k for row in both.tolist())  # without replacement
    else:  # pragma: no cover - a rule added without a range check here
        raise AssertionError(f"no range check for {name}")
    for value in p.values():
        assert value.device.type == "cpu"
        assert value.shape[0] == n


# ----------------------------------------------------------------------------- registry


def test_registry_holds_the_fifteen_rules_with_their_families():
    assert list_rules() == sorted(RULES)
    assert list_rules("affine") == AFFINE
    assert list_rules("pixel") == sorted(set(RULES) - set(AFFINE))
    assert all(get_rule(name).family == ("affine" if name in AFFINE else "pixel") for name in RULES)
    assert sorted(name for name in RULES if get_rule(name).neutral is not None) == sorted(WITH_NEUTRAL)


def test_unknown_rule_name_lists_the_known_ones():
    with pytest.raises(DeepFaultError, match=(r"unknown mutation rule 'tilt'"
                                              r"; did you mean 'dilate'\? \(known: black_patch, blur, ")):
        get_rule("tilt")
    with pytest.raises(DeepFaultError, match="unknown mutation rule 'tilt'"):
        apply_rule("tilt", images(), generator=gen(), bounds=(0, 1))


def test_registration_refuses_duplicates_and_bad_families():
    with pytest.raises(RuntimeError, match="registered twice"):
        register_rule("blur", family="pixel")(lambda x, **kw: (x, {}))
    with pytest.raises(DeepFaultError, match="family must be one of affine, pixel; got 'geometric'"):
        register_rule("tilt", family="geometric")
    with pytest.raises(DeepFaultError, match="family"):
        list_rules("geometric")


def test_neutral_params_and_rules_without_one():
    p = neutral_params("translation", 3)
    assert p.keys() == {"dx", "dy"}
    assert all(torch.equal(v, torch.zeros(3, dtype=torch.int64)) for v in p.values())
    with pytest.raises(DeepFaultError, match="'blur' has no neutral parameter; rules with one: brightness"):
        neutral_params("blur", 3)


# ----------------------------------------------------------------------------- contract


@pytest.mark.parametrize("name", RULES)
@pytest.mark.parametrize("bounds", [(0.0, 1.0), (0.0, 255.0)])
@pytest.mark.parametrize("channels", [1, 3])
def test_contract(name, bounds, channels):
    x = images(n=7, c=channels, h=12, w=9, hi=bounds[1])
    before = x.clone()
    y, params = apply_rule(name, x, generator=gen(1), bounds=bounds)
    assert y.shape == x.shape
    assert y.dtype == x.dtype
    assert y.device == x.device
    assert y.min() >= bounds[0]
    assert y.max() <= bounds[1]
    assert torch.equal(x, before)  # the input is never modified
    in_spec_range(name, params, tuple(x.shape))
    again, params_again = apply_rule(name, x, generator=gen(1), bounds=bounds)
    assert torch.equal(y, again)
    assert params.keys() == params_again.keys()
    assert all(torch.equal(params[k], params_again[k]) for k in params)
    assert not torch.equal(y, x)  # a random rule changes a random image


@pytest.mark.parametrize("name", RULES)
def test_float64_and_empty_batches(name):
    x = images(n=3, dtype=torch.float64)
    y, _ = apply_rule(name, x, generator=gen(), bounds=(0, 1))
    assert y.dtype == torch.float64
    assert y.shape == x.shape
    empty, params = apply_rule(name, x[:0], generator=gen(), bounds=(0, 1))
    assert empty.shape == (0, 1, 28, 28)
    assert all(v.shape[0] == 0 for v in params.values())


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    name=st.sampled_from(RULES),
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 12),
    size=st.tuples(st.integers(8, 20), st.integers(8, 20)),
)
def test_params_lie_in_the_spec_ranges(name, seed, n, size):
    x = images(n=n, h=size[0], w=size[1], seed=seed)
    y, params = apply_rule(name, x, generator=gen(seed), bounds=(0, 1))
    in_spec_range(name, params, tuple(x.shape))
    assert y.min() >= 0
    assert y.max() <= 1


@pytest.mark.parametrize(
    ("name", "key", "expected"),
    [
        ("translation", "dx", set(range(-3, 3))),
        ("blur", "filter", set(range(9))),
        ("gauss_noise", "var", {2, 1, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001}),
        ("multiplicative_noise", "var", {1, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001}),
    ],
)
def test_every_choice_is_drawn(name, key, expected):
    _, params = apply_rule(name, torch.zeros(300, 1, 8, 8), generator=gen(), bounds=(0, 1))
    assert set(params[key].tolist()) == expected


def test_every_kernel_shape_is_drawn_and_continuous_draws_fill_their_range():
    _, p = apply_rule("erode", torch.zeros(300, 1, 8, 8), generator=gen(), bounds=(0, 1))
    assert set(zip(p["kernel_h"].tolist(), p["kernel_w"].tolist(), strict=True)) == KERNELS
    _, p = apply_rule("rotation", torch.zeros(300, 1, 8, 8), generator=gen(), bounds=(0, 1))
    assert p["angle"].min() < -45
    assert p["angle"].max() > 45


# ----------------------------------------------------------------------------- identities, batching, units


@pytest.mark.parametrize("name", WITH_NEUTRAL)
@pytest.mark.parametrize("bounds", [(0.0, 1.0), (0.0, 255.0)])
def test_identity_at_the_neutral_parameter(name, bounds):
    x = images(n=5, c=3, h=10, w=13, hi=bounds[1])
    y, params = apply_rule(name, x, generator=gen(), bounds=bounds, params=neutral_params(name, 5))
    torch.testing.assert_close(y, x, atol=1e-5 * bounds[1], rtol=0)


def _full_params(name, x, bounds=(0.0, 1.0)):
    n = x.shape[0]
    if name == "blur":  # every filter once
        return {"filter": torch.arange(n) % 9}
    if name in ("erode", "dilate"):
        shapes = torch.tensor(sorted(KERNELS))[torch.arange(n) % 7]
        return {"kernel_h": shapes[:, 0], "kernel_w": shapes[:, 1]}
    return apply_rule(name, x, generator=gen(5), bounds=bounds)[1]


@pytest.mark.parametrize("name", RULES)
def test_batched_equals_one_image_at_a_time(name):
    x = images(n=9, c=3, h=11, w=10)
    params = _full_params(name, x)
    batched, used = apply_rule(name, x, bounds=(0, 1), params=params)  # no generator: nothing is drawn
    for i in range(len(x)):
        own = {k: v[i : i + 1] for k, v in used.items()}
        one, _ = apply_rule(name, x[i : i + 1], bounds=(0, 1), params=own)
        torch.testing.assert_close(batched[i : i + 1], one, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", RULES)
def test_the_pixel_range_is_a_change_of_units(name):
    """Mutating 0..1 data gives the 0..255 result over 255, and likewise for -1..1 data."""
    x = images(n=9, c=3, h=12, w=12, seed=3)
    params = _full_params(name, x)
    y01, _ = apply_rule(name, x, bounds=(0, 1), params=params)
    y255, _ = apply_rule(name, x * 255, bounds=(0, 255), params=params)
    ysym, _ = apply_rule(name, 2 * x - 1, bounds=(-1, 1), params=params)
    torch.testing.assert_close(y255 / 255, y01, atol=1e-5, rtol=0)
    torch.testing.assert_close((ysym + 1) / 2, y01, atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------- hand-checked cases


def _dot(h=12, w=12, row=5, col=6) -> torch.Tensor:
    x = torch.zeros(1, 1, h, w)
    x[0, 0, row, col] = 1.0
    return x


@pytest.mark.parametrize(("dx", "dy"), [(0, 0), (2, -3), (-3, 1), (-1, 2)])
def test_translation_moves_a_bright_pixel(dx, dy):
    y, _ = apply_rule("translation", _dot(), bounds=(0, 1), params={"dx": [dx], "dy": [dy]})
    expected = _dot(row=5 + dy, col=6 + dx)
    assert torch.equal(y, expected)


def test_translation_fills_vacated_pixels_with_lo():
    x = torch.full((1, 1, 8, 8), 0.5)
    y, _ = apply_rule("translation", x, bounds=(0.1, 1), params={"dx": [2], "dy": [-1]})
    assert torch.equal(y[0, 0, :, :2], torch.full((8, 2), 0.1))
    assert torch.equal(y[0, 0, -1], torch.full((8,), 0.1))
    assert torch.equal(y[0, 0, :-1, 2:], torch.full((7, 6), 0.5))


def test_rotation_by_90_degrees_about_the_centre_is_counter_clockwise():
    x = images(n=2, c=3, h=9, w=9)
    y, _ = apply_rule("rotation", x, bounds=(0, 1), params={"angle": [90.0, -90.0]})
    torch.testing.assert_close(y[0], torch.rot90(x[0], 1, dims=(-2, -1)), atol=1e-5, rtol=0)
    torch.testing.assert_close(y[1], torch.rot90(x[1], -1, dims=(-2, -1)), atol=1e-5, rtol=0)


def test_shear_about_the_top_left_corner():
    y, _ = apply_rule("shear", _dot(row=4, col=6), bounds=(0, 1), params={"factor": [1.0]})
    torch.testing.assert_close(y, _dot(row=4, col=2), atol=1e-6, rtol=0)  # x' = x - factor * y


def test_scale_pads_when_shrinking_and_crops_when_enlarging():
    x = torch.full((2, 1, 20, 20), 0.8)
    y, _ = apply_rule("scale", x, bounds=(0.2, 1), params={"factor": [0.7, 1.2]})
    assert torch.allclose(y[0, 0, 0], torch.tensor(0.2))
    assert torch.allclose(y[0, 0, 10, 10], torch.tensor(0.8))
    torch.testing.assert_close(y[1], x[1])
    # a dot at the centre of an odd image stays there
    y, _ = apply_rule("scale", _dot(h=9, w=9, row=4, col=4), bounds=(0, 1), params={"factor": [1.2]})
    assert y[0, 0].argmax().item() == 4 * 9 + 4


def test_contrast_and_brightness_of_a_constant_image():
    x = torch.full((2, 1, 8, 8), 100.0)
    y, _ = apply_rule("contrast", x, bounds=(0, 255), params={"alpha": [0.5, 1.5]})
    assert torch.equal(y[:, 0, 0, 0], torch.tensor([50.0, 150.0]))
    y, _ = apply_rule("contrast", x / 255, bounds=(0, 1), params={"alpha": [3.0, 1.5]})
    torch.testing.assert_close(y[:, 0, 0, 0], torch.tensor([1.0, 150 / 255]))  # clipped at hi
    y, _ = apply_rule("brightness", x / 255, bounds=(0, 1), params={"beta": [-20.0, 20.0]})
    torch.testing.assert_close(y[:, 0, 0, 0], torch.tensor([80 / 255, 120 / 255]))


@pytest.mark.parametrize(
    ("name", "value"), [("black_patch", 0.1), ("white_patch", 0.9), ("reverse_patch", None)]
)
def test_patches_set_exactly_four_pixels(name, value):
    x = 0.3 + 0.5 * images(n=4, c=3, h=10, w=8)
    params = {"row": [0, 8, 3, 8], "col": [0, 6, 2, 0]}
    y, _ = apply_rule(name, x, bounds=(0.1, 0.9), params=params)
    for i, (r, c) in enumerate(zip(params["row"], params["col"], strict=True)):
        changed = (y[i] != x[i]).any(dim=0)
        assert changed.sum() == 4
        assert changed[r : r + 2, c : c + 2].all()
        patch = y[i, :, r : r + 2, c : c + 2]
        expected = (1.0 - x[i, :, r : r + 2, c : c + 2]) if value is None else torch.full_like(patch, value)
        torch.testing.assert_close(patch, expected)


def test_salt_pepper_sets_the_right_count():
    x = torch.full((5, 3, 28, 28), 0.5)
    y, p = apply_rule("salt_pepper", x, generator=gen(), bounds=(0, 1))
    k = math.ceil(0.002 * 28 * 28)
    assert k == 2
    assert ((y == 1).all(dim=1).sum(dim=(1, 2)) == k).all()
    assert ((y == 0).all(dim=1).sum(dim=(1, 2)) == k).all()
    assert ((y != 0.5).sum(dim=(1, 2, 3)) == 2 * k * 3).all()
    assert (y.flatten(2).gather(2, p["salt"][:, None].expand(5, 3, k)) == 1).all()
    y, _ = apply_rule("salt_pepper", torch.full((2, 1, 100, 50), 0.5), generator=gen(), bounds=(0, 1))
    assert ((y != 0.5).sum(dim=(1, 2, 3)) == 20).all()  # 0.4% of 5,000


def test_noise_is_the_recorded_field_in_the_data_units():
    x = 0.25 + 0.5 * images(n=8, c=2, h=9, w=9)
    y, p = apply_rule("gauss_noise", x, generator=gen(), bounds=(0, 1))
    expected = x + (p["var"].sqrt() / 255).float().view(-1, 1, 1, 1) * p["noise"]
    torch.testing.assert_close(y, expected.clamp(0, 1))
    y, p = apply_rule("multiplicative_noise", x, generator=gen(), bounds=(0, 1))
    expected = x + x * p["var"].sqrt().float().view(-1, 1, 1, 1) * p["noise"]
    torch.testing.assert_close(y, expected.clamp(0, 1))
    big = torch.full((1, 1, 200, 200), 100.0)
    y, _ = apply_rule("gauss_noise", big, generator=gen(), bounds=(0, 255), params={"var": [2.0]})
    assert abs((y - big).std().item() - math.sqrt(2)) < 0.05


# ----------------------------------------------------------------------------- OpenCV conventions (scipy)


def _per_image(y: torch.Tensor, x: torch.Tensor, fn) -> None:
    for i in range(len(x)):
        for c in range(x.shape[1]):
            expected = fn(x[i, c].double().numpy())
            np.testing.assert_allclose(y[i, c].double().numpy(), expected, atol=1e-5)


@pytest.mark.parametrize(
    ("index", "reference"),
    [
        (0, lambda a: ndimage.uniform_filter(a, 3, mode="mirror")),
        (1, lambda a: ndimage.uniform_filter(a, 4, mode="mirror")),  # even size: OpenCV's anchor k // 2
        (2, lambda a: ndimage.uniform_filter(a, 5, mode="mirror")),
        (3, lambda a: ndimage.correlate(a, np.outer(*[np.array([0.25, 0.5, 0.25])] * 2), mode="mirror")),
        (5, lambda a: ndimage.correlate1d(ndimage.correlate1d(
            a, np.array([1, 3.5, 7, 9, 7, 3.5, 1]) / 32, axis=0, mode="mirror"),
            np.array([1, 3.5, 7, 9, 7, 3.5, 1]) / 32, axis=1, mode="mirror")),
        (6, lambda a: ndimage.median_filter(a, 3, mode="nearest")),
        (7, lambda a: ndimage.median_filter(a, 5, mode="nearest")),
    ],
)
def test_blur_filters_follow_opencv(index, reference):
    x = images(n=2, c=2, h=10, w=9)
    y, _ = apply_rule("blur", x, bounds=(0, 1), params={"filter": [index, index]})
    _per_image(y, x, reference)


def test_bilateral_blur_against_a_loop():
    """7x7 window, Gaussian space and colour weights (sigmas 50 px and 50/255 of the range)."""
    x = images(n=1, c=1, h=8, w=9)
    y, _ = apply_rule("blur", x, bounds=(0, 1), params={"filter": [8]})
    a = np.pad(x[0, 0].double().numpy(), 3, mode="reflect")
    out = np.zeros((8, 9))
    for r in range(8):
        for c in range(9):
            win = a[r : r + 7, c : c + 7]
            dy, dx = np.mgrid[-3:4, -3:4]
            space = np.exp(-(dy**2 + dx**2) / (2 * 50.0**2))
            wgt = space * np.exp(-((win - a[r + 3, c + 3]) ** 2) / (2 * (50 / 255) ** 2))
            out[r, c] = (wgt * win).sum() / wgt.sum()
    np.testing.assert_allclose(y[0, 0].double().numpy(), out, atol=1e-5)


@pytest.mark.parametrize("shape", sorted(KERNELS))
@pytest.mark.parametrize("name", ["erode", "dilate"])
def test_morphology_follows_opencv_anchor(name, shape):
    """OpenCV: ``out[y, x] = min/max v[y + i - kh // 2, x + j - kw // 2]``, outside pixels ignored;
    scipy's minimum/maximum filters centre a window the same way and do not reflect it."""
    x = images(n=2, c=2, h=9, w=8)
    y, _ = apply_rule(name, x, bounds=(0, 1), params={"kernel_h": [shape[0]] * 2, "kernel_w": [shape[1]] * 2})
    if name == "erode":
        _per_image(y, x, lambda a: ndimage.minimum_filter(a, size=shape, mode="constant", cval=np.inf))
    else:
        _per_image(y, x, lambda a: ndimage.maximum_filter(a, size=shape, mode="constant", cval=-np.inf))


def test_dilate_1x2_spreads_a_dot_to_the_right():
    y, _ = apply_rule("dilate", _dot(row=5, col=6), bounds=(0, 1), params={"kernel_h": [1], "kernel_w": [2]})
    assert torch.nonzero(y[0, 0]).tolist() == [[5, 6], [5, 7]]


# ----------------------------------------------------------------------------- errors and dependencies


def test_bad_arguments_are_named():
    x = images(n=2)
    with pytest.raises(DeepFaultError, match=r"float tensor \(N, C, H, W\); got shape \(1, 28, 28\)"):
        apply_rule("blur", x[0], generator=gen(), bounds=(0, 1))
    with pytest.raises(DeepFaultError, match="float tensor"):
        apply_rule("blur", (x * 255).to(torch.uint8), generator=gen(), bounds=(0, 255))
    with pytest.raises(DeepFaultError, match="at least 8x8 pixels"):
        apply_rule("blur", x[..., :7], generator=gen(), bounds=(0, 1))
    with pytest.raises(DeepFaultError, match="lo < hi"):
        apply_rule("blur", x, generator=gen(), bounds=(1, 0))
    with pytest.raises(DeepFaultError, match="bounds must be a pair"):
        apply_rule("blur", x, generator=gen(), bounds=1.0)
    with pytest.raises(DeepFaultError, match="CPU torch.Generator"):
        apply_rule("blur", x, generator=0, bounds=(0, 1))
    with pytest.raises(DeepFaultError, match="needs a generator to draw 'angle'"):
        apply_rule("rotation", x, bounds=(0, 1))
    shape_error = r"params\['angle'\] for mutation rule 'rotation' must have shape \(2,\)"
    with pytest.raises(DeepFaultError, match=shape_error):
        apply_rule("rotation", x, bounds=(0, 1), params={"angle": [1.0]})
    with pytest.raises(DeepFaultError, match=r"unknown params \['theta'\] for mutation rule 'rotation'"):
        apply_rule("rotation", x, bounds=(0, 1), params={"angle": [1.0, 2.0], "theta": [0, 0]})
    with pytest.raises(DeepFaultError, match=r"params\['filter'\] .* must lie in \[0, 8\]"):
        apply_rule("blur", x, bounds=(0, 1), params={"filter": [0, 9]})
    with pytest.raises(DeepFaultError, match="must hold integers"):
        apply_rule("translation", x, bounds=(0, 1), params={"dx": [0.5, 1], "dy": [0, 0]})


def test_partial_params_draw_the_rest():
    x = images(n=3)
    _, p = apply_rule("translation", x, generator=gen(), bounds=(0, 1), params={"dx": [1, 1, 1]})
    assert p["dx"].tolist() == [1, 1, 1]
    assert p["dy"].dtype == torch.int64


def test_missing_kornia_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "kornia", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install -e '\.\[fuzz\]'"):
        apply_rule("rotation", images(n=1), generator=gen(), bounds=(0, 1))
    apply_rule("contrast", images(n=1), generator=gen(), bounds=(0, 1))  # pure torch rules still work


def test_importing_deepfault_does_not_import_kornia():
    code = "import sys, deepfault, deepfault.fuzz.mutation.rules; sys.exit('kornia' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", RULES)
def test_results_do_not_depend_on_the_device(name):
    x = images(n=9, c=3, h=12, w=12)
    y_cpu, p_cpu = apply_rule(name, x, generator=gen(2), bounds=(0, 1))
    y_gpu, p_gpu = apply_rule(name, x.cuda(), generator=gen(2), bounds=(0, 1))
    assert y_gpu.device.type == "cuda"
    assert all(torch.equal(p_cpu[k], p_gpu[k]) for k in p_cpu)
    torch.testing.assert_close(y_gpu.cpu(), y_cpu, atol=1e-4, rtol=0)


def test_module_constants_match_the_spec():
    assert mut.BLUR_FILTERS[1] == "box4"
    assert len(mut.BLUR_FILTERS) == 9
    assert set(mut.MORPH_KERNELS) == KERNELS
