"""One campaign over many workers (issue 42, :mod:`deepfault.fuzz.campaign.workers`): the merge
counts each unique fault once, the sync shares failures and the diversity table, ``workers=1`` is
the one-process campaign, and the campaign survives a killed worker, a killed driver (rerun
resumes) and, on a two-node Ray test cluster, a lost node."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from deepfault.errors import DeepFaultError
from deepfault.experiment.store import ResultStore
from deepfault.fuzz.campaign import CampaignConfig, CampaignOptions, run_campaign
from deepfault.fuzz.campaign.budget import Budget
from deepfault.fuzz.campaign.checkpoint import DRFUZZ_METHOD
from deepfault.fuzz.campaign.metrics import FAULT_KINDS
from deepfault.fuzz.campaign.workers import merge_results, run_workers, worker_budget, worker_seed
from helpers.fuzz_problems import tiny_model

SRC = Path(__file__).resolve().parents[3] / "src"


def _problem():
    m1, m2 = tiny_model(0), tiny_model(0, noise=0.3)
    x = torch.rand(60, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = m1(x).argmax(1)
    return m1, m2, x, y


CONFIG = dict(fidelity="ssim:0.5", inputs_per_step=4, sync_every=0.5)


def _keys(result) -> list[tuple[int, int, int]]:
    f = result.faults
    rf = (f.kind == FAULT_KINDS.index("rf")) & ~f.initial
    return list(zip(f.root[rf].tolist(), f.y1[rf].tolist(), f.y2[rf].tolist(), strict=True))


def _sync(store: Path, experiment: str, worker: int):
    """Worker ``worker``'s last sync record (``None`` before it, or while the store is being made)."""
    try:
        with ResultStore(store, readonly=True) as s:
            return s.get(experiment, DRFUZZ_METHOD, f"campaign/w{worker}/sync")
    except (DeepFaultError, sqlite3.Error):
        return None


# --- pure parts ---------------------------------------------------------------------------------

def test_worker_streams_and_budgets():
    assert worker_seed(5, 0) == 5  # worker 0 is the campaign's own stream
    assert len({worker_seed(5, i) for i in range(8)}) == 8
    assert worker_seed(5, 3) == worker_seed(5, 3)
    shares = [worker_budget(Budget("iterations", 11), i, 3).value for i in range(3)]
    assert shares == [4, 4, 3]
    assert worker_budget(Budget("seconds", 9.0), 2, 3) == Budget("seconds", 9.0)
    with pytest.raises(DeepFaultError, match="cannot be shared by 4 workers"):
        worker_budget(Budget("iterations", 3), 0, 4)


def test_one_worker_is_the_one_process_campaign():
    config = CampaignConfig(budget="30it", **CONFIG)
    assert "workers" not in config.to_dict()  # the experiment key and result files as before
    assert config.key() == replace(config, workers=1, sync_every=9.0, executor="ray").key()
    assert replace(config, workers=2).key() != config.key()
    m1, m2, x, y = _problem()
    with pytest.raises(DeepFaultError, match="run_campaign runs one worker"):
        run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), config=replace(config, workers=2))


# --- two workers in processes -------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    m1, m2, x, y = _problem()
    store = tmp_path_factory.mktemp("workers") / "s.sqlite"
    config = CampaignConfig(budget="2.5s", workers=2, **CONFIG)
    result = run_workers(m1, m2, x, y, bounds=(0.0, 1.0), config=config, options=CampaignOptions(store=store))
    return result, store, config


def test_merge_counts_each_unique_fault_once(two_workers):
    result, _, _ = two_workers
    per = result.workers["per_worker"]
    assert [w["seed"] for w in per] == [0, worker_seed(0, 1)]
    assert all(w["iterations"] > 0 for w in per)
    assert result.iterations == sum(w["iterations"] for w in per)
    keys = _keys(result)
    assert result.metrics.urf == len(set(keys))
    assert result.metrics.urf > 0
    assert result.metrics.rf == len(keys)
    assert result.metrics.rf == sum(w["rf"] for w in per)
    # the rf rows and their inputs stay aligned through the merge: M2's prediction is their argmax
    rf = result.faults.select(result.faults.kind == FAULT_KINDS.index("rf"))
    np.testing.assert_array_equal(result.rf_p2.argmax(1), rf.y2)
    assert len(result.rf_inputs) == len(rf)
    assert np.all(np.diff(result.faults.elapsed[~result.faults.initial]) >= 0)
    assert result.workers["lost"] == []
    assert 0 <= result.workers["sync_share"] < 0.5


def test_the_sync_shares_failures(two_workers):
    result, store, config = two_workers
    experiment = config.key()
    syncs = [_sync(store, experiment, i) for i in range(2)]
    assert all(s is not None and s.data["syncs"] >= 2 for s in syncs)
    # each worker's last sync holds the keys it had taken in from the other as well as its own
    both = {tuple(k) for s in syncs for k in s.arrays["keys"].tolist()}
    assert set(_keys(result)) <= both


def test_a_rerun_returns_the_finished_workers(two_workers):
    result, store, config = two_workers
    m1, m2, x, y = _problem()
    again = run_workers(m1, m2, x, y, bounds=(0.0, 1.0), config=config, options=CampaignOptions(store=store))
    assert again.iterations == result.iterations
    assert _keys(again) == _keys(result)


def test_merge_of_a_lost_worker_without_checkpoint(two_workers):
    result, _, config = two_workers
    x = _problem()[2]
    merged = merge_results([result, None], config, inputs=x, lost={1: "killed by SIGKILL"})
    assert merged.metrics.urf == result.metrics.urf
    assert merged.workers["lost"] == [{"worker": 1, "reason": "killed by SIGKILL"}]
    with pytest.raises(DeepFaultError, match="no worker"):
        merge_results([None, None], config, inputs=x)


# --- faults survived ----------------------------------------------------------------------------

def _wait_for(check, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out")


def _campaign_while(config: CampaignConfig, store: Path, act) -> tuple:
    """``run_workers`` in a thread while ``act()`` runs here; ``(result, what act returned, warnings)``."""
    m1, m2, x, y = _problem()
    out: dict = {}

    def drive():
        out["result"] = run_workers(m1, m2, x, y, bounds=(0.0, 1.0), config=config,
                                    options=CampaignOptions(store=store))

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        driver = threading.Thread(target=drive)
        driver.start()
        acted = act()
        driver.join(timeout=180)
    return out["result"], acted, [str(w.message) for w in said]


def test_a_killed_worker_loses_no_synced_fault(tmp_path):
    store = tmp_path / "s.sqlite"
    config = CampaignConfig(budget="4s", workers=2, **CONFIG)

    def kill_worker_1():
        synced = _wait_for(lambda: store.exists() and _sync(store, config.key(), 1))
        os.kill(synced.data["pid"], signal.SIGKILL)
        return synced

    result, synced, said = _campaign_while(config, store, kill_worker_1)
    assert any("worker 1 of 2 was lost (killed by SIGKILL)" in message for message in said)
    assert result.workers["lost"] == [{"worker": 1, "reason": "killed by SIGKILL"}]
    lost = result.workers["per_worker"][1]
    # what worker 1 had synced before the kill is in the merged result: its faults and the
    # unique failures it knew of (its own and those it had taken in from worker 0)
    assert lost["stop_reason"] == "lost"
    assert lost["iterations"] >= synced.data["iterations"]
    assert lost["rf"] >= synced.data["rf"]
    assert result.metrics.urf >= len(synced.arrays["keys"])
    assert result.workers["per_worker"][0]["stop_reason"] == "budget"


DRIVER = """
import sys, torch
sys.path[:0] = [{src!r}, {tests!r}, {helpers!r}]
from test_workers import _problem, CONFIG
from deepfault.fuzz.campaign import CampaignConfig, CampaignOptions
from deepfault.fuzz.campaign.workers import run_workers
m1, m2, x, y = _problem()
config = CampaignConfig(budget="1500it", workers=2, **CONFIG)
r = run_workers(m1, m2, x, y, bounds=(0.0, 1.0), config=config, options=CampaignOptions(store={store!r}))
print("done", r.iterations)
"""


def test_a_killed_driver_resumes_every_worker(tmp_path):
    store = tmp_path / "s.sqlite"
    script = textwrap.dedent(DRIVER).format(src=str(SRC), tests=str(Path(__file__).parent),
                                            helpers=str(Path(__file__).parents[2]), store=str(store))
    config = CampaignConfig(budget="1500it", workers=2, **CONFIG)
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        # as soon as one worker has a checkpoint (both would race the first one's end on a busy machine)
        _wait_for(lambda: store.exists() and any(_sync(store, config.key(), i) for i in range(2)), 120)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its workers, at once
        proc.wait()
    m1, m2, x, y = _problem()
    result = run_workers(m1, m2, x, y, bounds=(0.0, 1.0), config=config, options=CampaignOptions(store=store))
    assert result.iterations == 1500  # every worker finished its share, from its checkpoint on
    assert all(w["stop_reason"] == "budget" for w in result.workers["per_worker"])
    assert result.resumed >= 1


# --- a two-node Ray test cluster ----------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # the workers import deepfault and this file's models from the paths the driver has
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    # one (declared, not real) GPU on each node: what --gpus-per-worker reserves
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1,
                                                            "include_dashboard": False})
    node = cluster.add_node(num_cpus=1, num_gpus=1)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        yield cluster, node
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_ray_workers_take_their_gpus_and_reach_the_store_through_its_server(ray_cluster, tmp_path,
                                                                           monkeypatch):
    cluster, _ = ray_cluster
    monkeypatch.chdir(tmp_path)
    # a relative path: a worker that opened it would open a file of its own folder, not the driver's
    store = Path("s.sqlite")
    config = CampaignConfig(budget="40it", workers=2, executor="ray", address=cluster.address,
                            gpus_per_worker=0.5, **CONFIG)
    m1, m2, x, y = _problem()
    result = run_workers(m1, m2, x, y, bounds=(0.0, 1.0), config=config, options=CampaignOptions(store=store))
    assert result.iterations == 40
    assert result.workers["sync_point"].startswith("store server on ")
    per = result.workers["per_worker"]
    assert all(w["gpus"] and w["node"] for w in per)  # each got a share of a (declared) GPU
    assert {w["device"] for w in per} == {"cuda:0" if torch.cuda.is_available() else "cpu"}
    assert all(_sync(tmp_path / "s.sqlite", config.key(), i) for i in range(2))  # synced in the driver's file
    with pytest.raises(DeepFaultError, match="needs a node with 2 GPU"):  # no node has them: refused at once
        run_workers(m1, m2, x, y, bounds=(0.0, 1.0), config=replace(config, gpus_per_worker=2.0),
                    options=CampaignOptions(store=tmp_path / "t.sqlite"))


def test_two_ray_nodes_one_campaign_and_a_lost_node(ray_cluster, tmp_path):
    cluster, node = ray_cluster
    store = tmp_path / "s.sqlite"
    config = CampaignConfig(budget="8s", workers=2, executor="ray", address=cluster.address, **CONFIG)

    def remove_a_node():
        _wait_for(lambda: store.exists() and all(_sync(store, config.key(), i) for i in range(2)), 120)
        cluster.remove_node(node)  # the node of one of the two workers (one CPU each)

    result, _, said = _campaign_while(config, store, remove_a_node)
    assert any("was lost" in message for message in said)
    assert len(result.workers["lost"]) == 1
    lost = result.workers["lost"][0]["worker"]
    assert result.workers["per_worker"][lost]["stop_reason"] == "lost"
    assert result.workers["per_worker"][1 - lost]["stop_reason"] == "budget"
    assert result.workers["sync_point"].startswith("store server on ")  # on the driver's node, not lost
    keys = _keys(result)
    assert result.metrics.urf == len(set(keys))


# --- the command line ---------------------------------------------------------------------------

def test_regress_workers_on_the_command_line(tmp_path, capsys):
    from deepfault.cli import main
    from helpers.hardening import write_regress_pair

    write_regress_pair(tmp_path, 60)
    argv = ["regress", "--m1", str(tmp_path / "m1.pt"), "--m2", str(tmp_path / "m2.pt"), "--dataset",
            str(tmp_path / "data.npz"), "--budget", "60it", "--inputs-per-step", "5", "--store",
            str(tmp_path / "s.sqlite"), "--no-progress", "--device", "cpu", "--fidelity", "ssim:0.5",
            "--workers", "2", "--sync-every", "0.5"]
    assert main([*argv, "--report", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "workers: 2 (process), syncing every 0.5 s through the store file" in out
    assert "ran on: worker 0 cpu on " in out
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "Workers: 2 (process), syncing every 0.5 s" in page  # the page's first lines say it too
    assert "stopped at the budget (60it)" in out
    document = (tmp_path / "s-drfuzz-seed0-faults.json").read_text()
    assert '"workers"' in document
    assert main(argv) == 0  # finished: read back from the workers' cells, no process started
    assert "finished before" in capsys.readouterr().out
