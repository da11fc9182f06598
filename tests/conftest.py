import os

import pytest
import torch

from helpers.tiny_models import chain_model


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
