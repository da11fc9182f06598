"""Property tests of every reader: a hostile file loads to valid values or raises DeepFaultError.

Readers: model files (metadata), ``.npz`` data sets, coverage profiles, store cells, TOML
grids, and input ``.npz`` files (``--split``). "Valid" means the values satisfy the
reader's contract *and* equal what the file holds: a damaged file never yields a silently
different figure.
"""

from __future__ import annotations

import io
import json
import math
import sqlite3

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepfault import DeepFaultError
from helpers.hardening import cli, outcome

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=6)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def _flip(data: bytes, where: int, how: str) -> bytes:
    where %= max(len(data), 1)
    if how == "truncate":
        return data[:where]
    if how == "zero":
        return data[:where] + b"\0" * 16 + data[where + 16 :]
    return data[:where] + bytes([data[where] ^ 0xFF]) + data[where + 1 :]


# --- model files ----------------------------------------------------------------------------------


@SETTINGS
@given(
    field=st.sampled_from(
        [
            "arch",
            "arch_kwargs",
            "state_dict",
            "bounds",
            "output_kind",
            "dataset",
            "meta",
            "arch_kwargs.num_classes",
            "arch_kwargs.hidden",
            "arch_kwargs.x",
        ]
    ),
    value=values,
)
def test_model_metadata_property(pair, tmp_path, field, value):
    from deepfault.models import load_model

    payload = torch.load(pair / "digits.pt", weights_only=True)
    if "." in field:
        if not isinstance(payload["arch_kwargs"], dict):
            return
        payload["arch_kwargs"][field.split(".")[1]] = value
    else:
        payload[field] = value
    path = tmp_path / "m.pt"
    torch.save(payload, path)
    try:
        mf = load_model(path)
    except DeepFaultError:
        return
    state = mf.model.state_dict()
    for key, tensor in payload["state_dict"].items():
        assert torch.equal(state[key], tensor)  # the weights are the file's, not a fresh model's
    assert mf.bounds is None or (math.isfinite(mf.bounds[0]) and mf.bounds[0] < mf.bounds[1])
    assert mf.output_kind in ("logits", "probabilities")


@SETTINGS
@given(where=st.integers(0, 10**6), how=st.sampled_from(["truncate", "flip", "zero"]))
def test_model_bytes_property(pair, tmp_path, where, how):
    from deepfault.models import load_model

    good = load_model(pair / "digits.pt")
    path = tmp_path / "m.pt"
    path.write_bytes(_flip((pair / "digits.pt").read_bytes(), where, how))
    try:
        mf = load_model(path)
    except DeepFaultError:
        return
    for (k, a), (_, b) in zip(
        sorted(mf.model.state_dict().items()), sorted(good.model.state_dict().items()), strict=True
    ):
        assert torch.equal(a, b), k  # a flipped byte that loads must not change a weight silently


# --- npz data sets and input files ------------------------------------------------------------------

labels = st.lists(
    st.one_of(st.integers(-5, 2**41), st.floats(allow_nan=True, allow_infinity=True)), min_size=1, max_size=5
)


@SETTINGS
@given(
    y=labels,
    lo=st.floats(-1e3, 1e3),
    span=st.floats(-1, 1e3),
    with_bounds=st.booleans(),
    scale=st.floats(allow_nan=True, allow_infinity=True),
    names=st.integers(0, 4),
)
def test_npz_dataset_property(tmp_path, y, lo, span, with_bounds, scale, names):
    from deepfault.data.npz import load_npz

    n = len(y)
    x = (np.linspace(0, 1, n * 4, dtype=np.float64).reshape(n, 4) * scale).astype(np.float32)
    arrays = {"x": x, "y": np.array(y)}
    if with_bounds:
        arrays["bounds"] = np.array([lo, lo + span])
    if names:
        arrays["class_names"] = np.array([f"c{i}" for i in range(names)])
    np.savez(tmp_path / "d.npz", **arrays)
    try:
        data = load_npz(tmp_path / "d.npz")
    except DeepFaultError:
        return
    assert np.array_equal(data.y_test, np.array(y).astype(np.int64))
    assert (np.array(y) == data.y_test).all()
    assert data.y_test.min() >= 0
    assert data.y_test.max() < len(data.class_names)
    assert np.array_equal(data.x_test, x)
    assert np.isfinite(data.x_test).all()
    assert data.bounds[0] <= data.x_test.min()
    assert data.x_test.max() <= data.bounds[1]


@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    y=labels,
    scale=st.floats(allow_nan=True, allow_infinity=True),
    shape=st.sampled_from([(1, 8, 8), (64,), (2, 8, 8), (8, 8)]),
)
def test_input_npz_property(pair, tmp_path, y, scale, shape):
    """``coverage rank --split FILE``: refused in one line, or ranked with the file's own labels."""
    n = len(y)
    x = (np.linspace(0, 1, n * int(np.prod(shape))).reshape(n, *shape) * scale).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x, y=np.array(y))
    (tmp_path / "r.json").unlink(missing_ok=True)  # hypothesis reuses tmp_path between examples
    status, _, err = cli(
        [
            "coverage",
            "rank",
            "--model",
            pair / "digits.pt",
            "--split",
            tmp_path / "x.npz",
            "--out",
            tmp_path / "r.json",
        ],
        tmp_path,
    )
    assert "Traceback" not in err
    if status == 2:
        assert len(err.strip().splitlines()) == 1
        assert not (tmp_path / "r.json").exists()
        return
    assert status == 0, err
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["num_inputs"] == n


# --- profiles ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def profile_arrays(tmp_path_factory):
    from deepfault.coverage import compute_profile

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    prof = compute_profile(model, torch.rand(10, 3), layers=["0"])
    path = tmp_path_factory.mktemp("prof") / "p.npz"
    prof.save(path)
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}, path.read_bytes()


arrays_ = st.one_of(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=5).map(np.array),
    st.lists(st.integers(-3, 10), max_size=5).map(np.array),
    st.lists(st.text(max_size=3), max_size=3).map(lambda v: np.array(v, dtype=str)),
    st.floats(allow_nan=True).map(np.array),
    st.text(max_size=5).map(np.array),
    st.integers(-3, 2**40).map(np.array),
)


@SETTINGS
@given(
    field=st.sampled_from(
        [
            "format",
            "layers",
            "sizes",
            "transform",
            "model_hash",
            "count",
            "low",
            "high",
            "mean",
            "std",
            "selection_kind",
            "selection",
        ]
    ),
    value=arrays_,
)
def test_profile_field_property(profile_arrays, tmp_path, field, value):
    from deepfault import load_profile

    arrays = dict(profile_arrays[0])
    arrays[field] = value
    np.savez(tmp_path / "p.npz", **arrays)
    try:
        p = load_profile(tmp_path / "p.npz")
    except DeepFaultError:
        return
    for k in ("low", "high", "mean", "std"):
        assert np.array_equal(getattr(p, k), np.asarray(arrays[k], dtype=np.float64))
        assert np.isfinite(getattr(p, k)).all()
    assert (p.low <= p.high).all()
    assert (p.std >= 0).all()
    assert p.count >= 1
    assert sum(p.sizes) == len(p.low)


@SETTINGS
@given(where=st.integers(0, 10**5), how=st.sampled_from(["truncate", "flip", "zero"]))
def test_profile_bytes_property(profile_arrays, tmp_path, where, how):
    from deepfault import load_profile

    good, raw = profile_arrays
    (tmp_path / "p.npz").write_bytes(_flip(raw, where, how))
    try:
        p = load_profile(tmp_path / "p.npz")
    except DeepFaultError:
        return
    for k in ("low", "high", "mean", "std"):
        assert np.array_equal(getattr(p, k), good[k])


# --- store cells ------------------------------------------------------------------------------------


@SETTINGS
@given(
    data=st.one_of(values.map(json.dumps), st.text(max_size=20)),
    blob=st.one_of(st.none(), st.binary(max_size=64), st.integers(0, 10**6)),
)
def test_store_cell_property(tmp_path, data, blob):
    from deepfault.experiment.store import ResultStore, _blob

    good = _blob({"a": np.arange(5)})
    path = tmp_path / "s.sqlite"
    path.unlink(missing_ok=True)
    with ResultStore(path) as s:
        s.begin("e", "n", {}, {})
        s.put("e", "deepfault", "c", {"ok": 1})
    raw = None if blob is None else (_flip(good, blob, "flip") if isinstance(blob, int) else blob)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE cells SET data = ?, arrays = ?", (data, raw))
    with ResultStore(path, readonly=True) as s:
        rec, refusal = outcome(s.get, "e", "deepfault", "c")
        if refusal is not None:
            assert "'c'" in refusal
            assert "\n" not in refusal
            assert s.done("e") == set()  # a corrupt cell never counts as done
            return
        assert rec.data == json.loads(data)
        assert isinstance(rec.data, dict)
        if raw is not None and rec.arrays:
            np.testing.assert_array_equal(rec.arrays["a"], np.arange(5))
        assert s.done("e") == {"c"}


# --- TOML grids -------------------------------------------------------------------------------------

BASE = {
    "name": '"p"',
    "dataset": '"digits"',
    "ks": "[1]",
    "classes": "[0]",
    "approaches": '["ochiai"]',
    "inputs_per_class": "2",
    "random_repetitions": "1",
    "step": "1.0",
    "distance": "0.1",
    "star": "3.0",
    "seed": "0",
    "threshold": "0.0",
    "iterations": "1",
    "train_epochs": "1",
    "scale01": "false",
}
toml_values = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats().map(lambda f: repr(f).replace("nan", "nan")),
    st.text(alphabet="abc./ ", max_size=5).map(json.dumps),
    st.lists(st.integers(-3, 2000), max_size=3).map(str),
    st.booleans().map(str).map(str.lower),
)


@SETTINGS
@given(key=st.sampled_from(sorted(BASE)), value=toml_values)
def test_toml_property(tmp_path, key, value):
    from deepfault.localization.preset import load_config

    body = "\n".join(f"{k} = {value if k == key else v}" for k, v in BASE.items())
    (tmp_path / "g.toml").write_text(body + '\n[[models]]\nname = "m"\narch = "digits_mlp"\n')
    config, refusal = outcome(load_config, tmp_path / "g.toml")
    if refusal is not None:
        assert "\n" not in refusal
        return
    assert config.seed >= 0
    assert all(k >= 1 for k in config.ks)
    assert math.isfinite(config.threshold)
    assert "/" not in config.name
    assert len(set(config.ks)) == len(config.ks)


def test_blob_helpers_are_exact():
    from deepfault.experiment.store import _blob, _unblob

    arrays = {"a": np.arange(3), "b": np.ones((2, 2), np.float32)}
    back = _unblob(_blob(arrays))
    assert all(np.array_equal(back[k], arrays[k]) for k in arrays)
    buf = io.BytesIO()
    np.save(buf, np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(DeepFaultError, match="corrupt"):
        _unblob(buf.getvalue())
