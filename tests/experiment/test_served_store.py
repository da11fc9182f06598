"""A results store served to workers (:mod:`deepfault.experiment.served`): a worker's
:class:`RemoteStore` answers as the store itself does, and a campaign checkpoints, resumes and
finishes through one with the same result as through the file."""

from __future__ import annotations

import numpy as np
import pytest

from deepfault.errors import DeepFaultError
from deepfault.experiment.served import RemoteStore, StoreServer
from deepfault.experiment.store import ResultStore
from deepfault.fuzz.campaign import CampaignConfig, CampaignOptions, run_campaign
from helpers.fuzz_problems import tiny_problem


def test_a_remote_store_answers_as_the_store(tmp_path):
    path = tmp_path / "s.sqlite"
    server = StoreServer(path)
    remote = RemoteStore(server, path)
    with remote as store:
        store.begin("e", name="cell", config={"a": 1}, provenance={}, method="m")
        store.put("e", "m", "c/1", {"x": 1}, {"v": np.arange(3)})
        store.put("e", "m", "c/2", {"x": 2}, replace=True)
        record = store.get("e", "m", "c/1")
        assert record.data == {"x": 1}
        np.testing.assert_array_equal(record.arrays["v"], np.arange(3))
        assert store.get("e", "m", "missing") is None
        assert [r.cell_id for r in store.records("e", "m", arrays=False)] == ["c/1", "c/2"]
        assert store.require(record, "x") is record
        corrupt = r"cell 'c/1' in the results store .*s\.sqlite' is corrupt \(no y\)"
        with pytest.raises(DeepFaultError, match=corrupt):
            store.require(record, "y")
        assert store.delete_cells("e", "m", "c") == 2
    server.close()
    with ResultStore(path, readonly=True) as plain:  # the server wrote the driver's file
        assert plain.experiments()[0]["name"] == "cell"
    with pytest.raises(ValueError, match="no method 'writer'"):
        StoreServer(path).call("writer", (), {})


def _counts(result) -> dict:
    """The result's counts (its seconds differ from run to run)."""
    return {**result.metrics.to_dict(), "seconds_to_first_rf": None, "iterations": result.iterations,
            "generated": result.generated}


def test_a_campaign_through_a_served_store_equals_one_through_the_file(tmp_path):
    m1, m2, x, y = tiny_problem(40)
    config = CampaignConfig(budget="40it", fidelity="ssim:0.5", inputs_per_step=4, checkpoint_every=0.0)
    direct = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), config=config,
                          options=CampaignOptions(store=tmp_path / "file.sqlite"))
    path = tmp_path / "served.sqlite"
    served = RemoteStore(StoreServer(path), path)
    options = CampaignOptions(store=served)
    first = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), config=config, options=options)
    assert _counts(first) == _counts(direct)
    np.testing.assert_array_equal(first.faults.root, direct.faults.root)
    # finished: a second run reads the result back through the server, as from the file
    again = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), config=config, options=options)
    assert _counts(again) == _counts(direct)
