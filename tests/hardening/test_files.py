"""Issue 20: files that are not what they claim (model metadata, stores, profiles) are refused by name."""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import shutil
import sqlite3

import numpy as np
import pytest
import torch

from deepfault import DeepFaultError
from helpers.hardening import assert_refused, cli, tiny_grid_toml

TOML = tiny_grid_toml(classes=(0, 1), inputs_per_class=2)

# --- model files whose metadata lies --------------------------------------------------------------

HOSTILE_META = {
    "huge classes": lambda p: p["arch_kwargs"].update(num_classes=10**12),
    "negative classes": lambda p: p["arch_kwargs"].update(num_classes=-3),
    "unknown keyword": lambda p: p["arch_kwargs"].update(bogus=1),
    "no state_dict": lambda p: p.pop("state_dict"),
    "list metadata": lambda p: p.update(arch_kwargs=[10]),
    "meta a list": lambda p: p.update(meta=[1, 2]),
    "nan bounds": lambda p: p.update(bounds=[float("nan"), 1.0]),
    "wide hidden": lambda p: p["arch_kwargs"].update(hidden=[10**6, 10**6]),
    "unknown arch": lambda p: p.update(arch="nosuch"),
    # issue 43: inspect made a tensor of it (a traceback), the others named it only against the data
    "negative input shape": lambda p: p.setdefault("meta", {}).update(input_shape=[-3, 8, 8]),
    "huge input shape": lambda p: p.setdefault("meta", {}).update(input_shape=[10**12, 10**12]),
    "text input shape": lambda p: p.setdefault("meta", {}).update(input_shape="1,8,8"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_META))
def test_model_metadata_is_validated_before_building(pair, tmp_path, case):
    payload = torch.load(pair / "digits.pt", weights_only=True)
    HOSTILE_META[case](payload)
    bad = tmp_path / "bad.pt"
    torch.save(payload, bad)
    work = tmp_path / "w"
    work.mkdir()
    for argv in (
        ["run", "--model", bad, "--out", "-", "-q"],
        ["inspect", bad, "--input-shape", "1,8,8"],
        ["coverage", "measure", "--model", bad, "--out", "-"],
        ["xplore", "--model", f"{bad},{pair / 'digits.pt'}", "--out", "-"],
        ["regress", "--m1", bad, "--m2", pair / "digits.pt", "--budget", "5it"],
    ):
        assert_refused(argv, work, "bad.pt")


# --- stores: corrupt cells name themselves; a resume recomputes them ---------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("store")
    (d / "g.toml").write_text(TOML)
    status, _, err = cli(["experiment", "--config", "g.toml", "--store", "t.sqlite", "--no-progress"], d)
    assert status == 0, err
    return d


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def _pickled_npz() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, a=np.array([_Evil()], dtype=object))
    return buf.getvalue()


CORRUPT = {
    "truncated blob": ("arrays", lambda blob, data: blob[: len(blob) // 2]),
    "pickled npz blob": ("arrays", lambda blob, data: _pickled_npz()),
    "raw pickle blob": ("arrays", lambda blob, data: pickle.dumps(_Evil())),
    "json list": ("data", lambda blob, data: "[1, 2, 3]"),
    "json garbage": ("data", lambda blob, data: "{ nope"),
}


def _corrupt(path, column, change):
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # closed: no -wal/-shm left open
        cell_id, data, blob = db.execute(
            "SELECT cell_id, data, arrays FROM cells ORDER BY cell_id"
        ).fetchone()
        db.execute(f"UPDATE cells SET {column} = ? WHERE cell_id = ?", (change(blob, data), cell_id))
    return cell_id, data


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_cell_in_report_names_itself_and_resume_recomputes_it(store, tmp_path, case):
    shutil.copytree(store, tmp_path / "s")
    d = tmp_path / "s"
    cell_id, original = _corrupt(d / "t.sqlite", *CORRUPT[case])
    line = assert_refused(["report", "t.sqlite", "--out", "rep"], d, cell_id, "corrupt")
    assert "rerun" in line
    status, out, err = cli(["experiment", "--config", "g.toml", "--store", "t.sqlite", "--no-progress"], d)
    assert status == 0, err
    assert "1 run now, 1 already in the store" in out, out
    with sqlite3.connect(d / "t.sqlite") as db:
        again = db.execute("SELECT data FROM cells WHERE cell_id = ?", (cell_id,)).fetchone()[0]
    drop = ("seconds", "spectrum_seconds", "synthesis_seconds")
    import json

    def clean(text):
        return {k: v for k, v in json.loads(text).items() if not any(s in k for s in drop)}

    assert clean(again) == clean(original)  # recomputed exactly
    assert not (d / "PWNED").exists()
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("schema", ["abc", "2.5", ""])
def test_non_integer_schema_version(store, tmp_path, schema):
    shutil.copytree(store, tmp_path / "s")
    with sqlite3.connect(tmp_path / "s" / "t.sqlite") as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (schema,))
    assert_refused(["report", "t.sqlite"], tmp_path / "s", "schema")
    assert_refused(["experiment", "--config", "g.toml", "--store", "t.sqlite"], tmp_path / "s", "schema")


def test_campaign_checkpoint_missing_fields_names_the_cell(tmp_path):
    from deepfault.experiment.store import Record, ResultStore

    with (ResultStore(tmp_path / "s.sqlite") as s,
          pytest.raises(DeepFaultError, match="'c/checkpoint'.*corrupt.*fault_chunks")):
        s.require(Record("c/checkpoint", {"config": {}}), "config", "fault_chunks")


# --- profiles --------------------------------------------------------------------------------------


def _profile(tmp_path, pair):
    from deepfault.coverage import compute_profile
    from deepfault.models import load_model

    mf = load_model(pair / "digits.pt")
    prof = compute_profile(mf.model, np.random.default_rng(0).random((20, 1, 8, 8)).astype(np.float32))
    path = tmp_path / "p.npz"
    prof.save(path)
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}


HOSTILE_PROFILE = {
    "low nan": lambda a: a["low"].__setitem__(0, np.nan),
    "high inf": lambda a: a["high"].__setitem__(0, np.inf),
    "low above high": lambda a: a.update(low=a["high"] + 1),
    "negative std": lambda a: a["std"].__setitem__(0, -1.0),
    "low of rank 2": lambda a: a.update(low=a["low"][None]),
    "sizes as text": lambda a: a.update(sizes=np.array(["24"] * len(a["sizes"]))),
    "count negative": lambda a: a.update(count=np.array(-5)),
    "transform bogus": lambda a: a.update(transform=np.array("bogus")),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_PROFILE))
def test_hostile_profiles_are_refused(pair, tmp_path, case):
    from deepfault import load_profile

    arrays = _profile(tmp_path, pair)
    HOSTILE_PROFILE[case](arrays)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DeepFaultError, match="damaged profile"):
        load_profile(tmp_path / "bad.npz")
    for command in ("measure", "rank"):
        assert_refused(
            [
                "coverage",
                command,
                "--model",
                pair / "digits.pt",
                "--criteria",
                "kmnc",
                "--profile",
                tmp_path / "bad.npz",
                "--out",
                "o.json",
            ],
            tmp_path,
            "damaged profile",
        )
