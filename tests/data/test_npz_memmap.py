"""``load_npz`` memory-maps uncompressed float32 inputs and reads the rest a chunk at a time
(issue 26: the inputs never need to fit in memory)."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from deepfault.data import npz as npz_module
from deepfault.data.npz import load_npz
from deepfault.errors import DeepFaultError


def _arrays(n: int = 7, dtype=np.float32) -> dict:
    rng = np.random.default_rng(0)
    return {"x": rng.random((n, 2, 3, 4)).astype(dtype), "y": np.arange(n) % 3,
            "x_train": rng.random((n + 2, 2, 3, 4)).astype(dtype), "y_train": np.arange(n + 2) % 3}


def _mapped(a: np.ndarray) -> bool:
    """Whether ``a``'s memory is a file mapping."""
    base = a
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None) if not isinstance(base, np.memmap) else base._mmap
    return isinstance(base, mmap.mmap)


def test_uncompressed_float32_inputs_are_memory_mapped(tmp_path):
    arrays = _arrays()
    path = tmp_path / "d.npz"
    np.savez(path, **arrays)
    data = load_npz(path)
    with np.load(path) as ref:
        for key, got in (("x", data.x_test), ("x_train", data.x_train)):
            assert type(got) is np.ndarray
            assert got.dtype == np.float32
            assert got.flags.c_contiguous
            assert _mapped(got), key
            np.testing.assert_array_equal(got, ref[key])
    data.x_test[0, 0, 0, 0] = 5.0  # copy-on-write: the process's own page, never the file
    with np.load(path) as ref:
        np.testing.assert_array_equal(ref["x"], arrays["x"])


@pytest.mark.parametrize(("save", "dtype"), [(np.savez_compressed, np.float32), (np.savez, np.float64),
                                             (np.savez, np.uint8), (np.savez_compressed, np.uint8)])
def test_other_storage_is_read_and_converted(tmp_path, save, dtype):
    arrays = _arrays(dtype=dtype)
    if dtype == np.uint8:
        arrays = {**arrays, "bounds": np.array([0, 255])}
    path = tmp_path / "d.npz"
    save(path, **arrays)
    data = load_npz(path)
    for key, got in (("x", data.x_test), ("x_train", data.x_train)):
        assert got.dtype == np.float32
        assert not _mapped(got)
        np.testing.assert_array_equal(got, arrays[key].astype(np.float32))


def test_fortran_order_and_chunks(tmp_path, monkeypatch):
    """A Fortran-order array is read whole; the checks run over many chunks and still find the
    first input out of bounds, NaNs and the range."""
    monkeypatch.setattr(npz_module, "_CHUNK_BYTES", 100)  # one input (96 bytes) per chunk
    arrays = _arrays()
    np.savez(tmp_path / "f.npz", **{**arrays, "x": np.asfortranarray(arrays["x"])})
    np.testing.assert_array_equal(load_npz(tmp_path / "f.npz").x_test, arrays["x"])
    x = arrays["x"].copy()
    x[5, 1, 2, 3] = np.nan
    np.savez(tmp_path / "nan.npz", **{**arrays, "x": x})
    with pytest.raises(DeepFaultError, match="array 'x' holds NaN or infinite values"):
        load_npz(tmp_path / "nan.npz")
    x[5, 1, 2, 3] = 3.0
    np.savez(tmp_path / "range.npz", **{**arrays, "x": x, "bounds": [0, 1]})
    with pytest.raises(DeepFaultError, match=r"array 'x' ranges over \[0.0\d+, 3\], outside the bounds"):
        load_npz(tmp_path / "range.npz")
    hi = np.ones((2, 3, 4))
    np.savez(tmp_path / "feature.npz", **{**arrays, "x": x, "bounds": np.stack([0 * hi, hi])})
    with pytest.raises(DeepFaultError, match=r"array 'x' input 5 has 3 at feature \(1, 2, 3\), outside its"):
        load_npz(tmp_path / "feature.npz")


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, 0.99])
def test_a_truncated_file_is_a_one_line_error(tmp_path, save, keep):
    path = tmp_path / "d.npz"
    save(path, **_arrays(200))
    raw = path.read_bytes()
    path.write_bytes(raw[: int(len(raw) * keep)])
    with pytest.raises(DeepFaultError, match=r"^cannot read .*d\.npz as \.npz .*; save it with numpy") as err:
        load_npz(path)
    assert "\n" not in str(err.value)


def test_a_member_shorter_than_its_header_says(tmp_path):
    """A consistent zip whose member's .npy header promises more data than it holds."""
    import zipfile

    path = tmp_path / "short.npz"
    np.savez(path, **_arrays())
    with zipfile.ZipFile(path) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    members["x.npy"] = members["x.npy"][:-8]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for name, blob in members.items():
            zf.writestr(name, blob)
    with pytest.raises(DeepFaultError, match=r"^cannot read .* \(ValueError: member x.npy is shorter"):
        load_npz(path)


def _rss_file() -> int | None:
    """This process's resident file-backed bytes (``RssFile``), ``None`` off Linux."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("RssFile:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _big_npz(tmp_path, n: int = 1024):
    x = np.random.default_rng(0).random((n, 3, 64, 64), dtype=np.float32)  # 48 MiB
    path = tmp_path / "big.npz"
    np.savez(path, x=x, y=np.arange(n) % 3)
    return path, x


@pytest.mark.skipif(_rss_file() is None, reason="needs /proc/self/status (Linux)")
def test_a_mapped_files_pages_are_handed_back(tmp_path, monkeypatch):
    """Loading leaves none of the checked pages resident, and ``release`` drops what a read
    made resident, without changing a value (issue 26: top's RES stays flat)."""
    from deepfault.core.mapped import release

    path, x = _big_npz(tmp_path)
    before, peak = _rss_file(), [0]
    real_release = npz_module.release

    def watched() -> int:  # the resident file pages at each check chunk's end
        peak[0] = max(peak[0], _rss_file() - before)
        return real_release()

    monkeypatch.setattr(npz_module, "release", watched)
    data = load_npz(path)
    assert _mapped(data.x_test)
    assert _rss_file() - before < 8 << 20  # the checks read all 48 MiB; they are handed back
    assert 0 < peak[0] < 24 << 20  # a chunk (16 MiB) at a time, never the whole file
    assert float(data.x_test.sum(dtype=np.float64)) == pytest.approx(float(x.sum(dtype=np.float64)))
    assert _rss_file() - before > 32 << 20  # a whole read makes them resident...
    release()
    assert _rss_file() - before < 8 << 20  # ...and a release hands them back
    np.testing.assert_array_equal(data.x_test[::97], x[::97])  # read again from the file


@pytest.mark.skipif(_rss_file() is None, reason="needs /proc/self/status (Linux)")
def test_a_pass_over_mapped_inputs_keeps_resident_memory_flat(tmp_path):
    """The batch loop hands each read batch's pages back: the file's resident pages during a
    pass stay a small part of the 48 MiB read."""
    import torch

    import deepfault as df
    path, _ = _big_npz(tmp_path)
    data = load_npz(path)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(4, 3)).eval()
    seen: list[int] = []  # RssFile at each of the 16 batches (the first pages in torch's code too)
    net.register_forward_hook(lambda *_: seen.append(_rss_file()))
    df.compute_profile(net, data.x_test, batch_size=64)
    assert len(seen) == 16
    rise = max(seen) - seen[0]
    assert rise < 8 << 20, f"resident file pages rose by {rise / 2**20:.1f} MiB over a pass reading 48 MiB"


@pytest.mark.skipif(_rss_file() is None, reason="needs /proc/self/status (Linux)")
def test_the_surprise_caches_hash_of_mapped_inputs_hands_pages_back(tmp_path, monkeypatch):
    """The training split's fingerprint reads every page; a chunk at a time, handed back."""
    import hashlib

    from deepfault.coverage import surprise_cache

    path, x = _big_npz(tmp_path)
    data = load_npz(path)
    before, peak = _rss_file(), [0]
    real_release = surprise_cache.release

    def watched() -> int:
        peak[0] = max(peak[0], _rss_file() - before)
        return real_release()

    monkeypatch.setattr(surprise_cache, "release", watched)
    digest = surprise_cache.training_fingerprint(data.x_test)
    assert digest == hashlib.sha256(repr(x.shape).encode() + x.tobytes()).hexdigest()
    assert 0 < peak[0] < 24 << 20
