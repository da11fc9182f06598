import os

import pytest
import torch

from helpers.tiny_models import chain_model

#: Set by tests/core/test_float_portability.py for its child runs: the thread count PyTorch uses.
THREADS_VARIABLE = "DEEPFAULT_TEST_THREADS"


def pytest_configure(config):
    """Run on ``DEEPFAULT_TEST_THREADS`` PyTorch threads where it is set (the float-portability
    runs; ``ATEN_CPU_CAPABILITY`` is read by PyTorch itself)."""
    threads = os.environ.get(THREADS_VARIABLE)
    if threads:
        torch.set_num_threads(int(threads))


def pytest_report_header(config):
    return f"torch {torch.__version__}: cpu capability {torch.backends.cpu.get_cpu_capability()}, " \
           f"{torch.get_num_threads()} threads"


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Keep the default model cache and data root out of the user's home, and never download
    a data set on first use (the suite is offline; tests of that path unset the variable).
    """
    cache = tmp_path_factory.mktemp("cache")
    old = {k: os.environ.get(k) for k in ("DEEPFAULT_CACHE", "DEEPFAULT_DATA", "DEEPFAULT_THREADS",
                                          "DEEPFAULT_NO_DOWNLOAD")}
    # the API keeps the tests' thread count: one and two threads differ in the last digits
    os.environ["DEEPFAULT_THREADS"] = "none"
    os.environ["DEEPFAULT_CACHE"] = str(cache)
    os.environ["DEEPFAULT_DATA"] = str(cache / "data")
    os.environ["DEEPFAULT_NO_DOWNLOAD"] = "1"
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(autouse=True)
def _deterministic():
    torch.use_deterministic_algorithms(True, warn_only=True)


@pytest.fixture
def chain():
    return chain_model()


@pytest.fixture
def one_torch_thread():
    """PyTorch on one thread for the test, restored afterwards (tiny models are fastest so)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def ray_cluster():
    """Ray's two-node test cluster (tests/helpers/ray_cluster.py), one per session, shared by every
    Ray test; skipped where Ray is not installed. ``ray_cluster.address()`` joins it (restarting it
    after a test that stopped it).
    """
    pytest.importorskip("ray")
    from helpers.ray_cluster import SharedCluster

    shared = SharedCluster()
    yield shared
    shared.stop()
