"""How a runtime is made from declared options: :meth:`Runtime.spread` and the declarations
shared between two configs (:func:`~deepfault.core.constraints.param_of`)."""

from dataclasses import dataclass, fields

import pytest

from deepfault.core.constraints import KEY, Declared, Interval, file_param, param, param_of, validate
from deepfault.core.executors import Parallel
from deepfault.core.runtime import Runtime
from deepfault.errors import DeepFaultError


def test_a_serial_runtime_keeps_no_shard_state():
    runtime = Runtime.spread(Parallel(), "out/r.json", threads=1)
    assert (runtime.shard_state, runtime.threads, runtime.parallel) == (None, 1, Parallel())


def test_a_spread_pass_keeps_its_shards_beside_its_result():
    parallel = Parallel(workers=2, executor="process")
    assert Runtime.spread(parallel, "out/r.json").shard_state == "out/r.json.shards"
    assert Runtime.spread(parallel, None).shard_state is None


@dataclass(frozen=True)
class _First:
    count: int = param(3, Interval(int, 1, 9), metavar="N", help="how many")


@dataclass(frozen=True)
class _Second:
    count: int = param_of(_First, "count", help="how many of them")
    other: int = param_of(_First, "count", default=5)

    def __post_init__(self):
        validate(self)


def test_param_of_shares_a_declaration_with_its_changes():
    first, second, other = (f.metadata for f in (*fields(_First), *fields(_Second)))
    assert second[KEY] is first[KEY]
    assert second["metavar"] == "N"
    assert (second["help"], other["help"]) == ("how many of them", "how many")
    assert (_Second().count, _Second().other) == (3, 5)
    with pytest.raises(DeepFaultError, match="count must be"):
        _Second(count=10)


@dataclass(frozen=True)
class _Files(Declared):
    out: str | None = file_param("r.json", "the result")
    data: str | None = file_param(None, "the data", role="input", metavar="DIR", folder=True)


def test_a_file_param_declares_its_role_and_a_declared_dataclass_checks_itself():
    out, data = (f.metadata for f in fields(_Files))
    assert (out[KEY].role, data[KEY].role, data[KEY].folder) == ("output", "input", True)
    assert (out["metavar"], out["plain_help"], data["metavar"]) == ("FILE", True, "DIR")
    with pytest.raises(DeepFaultError, match="out must be a file name"):
        _Files(out="")
