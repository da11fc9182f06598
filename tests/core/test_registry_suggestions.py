""""Did you mean" (issue 27): every registry's unknown-name error offers the closest names, in
the registry's own word, on one line; the helpers behind it, and lookups that are no registry.
"""

from __future__ import annotations

import pytest

from deepfault.core.registry import Registry, did_you_mean, suggestion, unknown_name
from deepfault.errors import DeepFaultError


def _registries() -> dict[str, Registry]:
    from deepfault.coverage.criteria import CRITERIA
    from deepfault.coverage.measure import SCORE_CRITERIA
    from deepfault.coverage.uncertainty import UNCERTAINTY
    from deepfault.data._api import DATASETS
    from deepfault.experiment.executors import EXECUTORS
    from deepfault.experiment.method import METHODS
    from deepfault.experiment.presets import PRESETS
    from deepfault.fuzz.campaign.strategies import STRATEGIES
    from deepfault.fuzz.fidelity.checks import FIDELITIES
    from deepfault.fuzz.mutation.mcmc import CHOOSERS
    from deepfault.fuzz.mutation.rules import _RULES
    from deepfault.fuzz.pairs.scenarios import SCENARIOS
    from deepfault.localization.measures import MEASURES
    from deepfault.localization.selection import APPROACHES
    from deepfault.models._api import ARCHITECTURES
    from deepfault.models.deploy import DEPLOY_FORMATS
    from deepfault.models.load import MODEL_FORMATS
    from deepfault.xplore.constraints import CONSTRAINTS

    found = [CRITERIA, SCORE_CRITERIA, UNCERTAINTY, DATASETS, EXECUTORS, METHODS, PRESETS, STRATEGIES,
             FIDELITIES, CHOOSERS, _RULES, DEPLOY_FORMATS, SCENARIOS, MEASURES, APPROACHES, ARCHITECTURES,
             MODEL_FORMATS, CONSTRAINTS]
    return {r.kind: r for r in found}


REGISTRIES = _registries()
TYPOS = [(kind, name) for kind, r in REGISTRIES.items() for name in r.names()]


@pytest.mark.parametrize(("kind", "name"), TYPOS, ids=[f"{k}:{n}" for k, n in TYPOS])
def test_a_typo_of_every_registered_name_suggests_it_first(kind, name):
    registry = REGISTRIES[kind]
    typo = name + name[-1]  # one letter too many: 'ochiaii'
    if typo in registry:
        pytest.skip(f"{typo!r} is registered too")
    with pytest.raises(DeepFaultError) as info:
        registry.get(typo)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"unknown {kind} {typo!r}; did you mean {name!r}")
    assert "(known: " in message
    assert did_you_mean(typo, registry.names())[0] == name


def test_the_message_reads_as_the_issue_asks():
    assert unknown_name("measure", "ochia", ["dstar", "ochiai", "tarantula"]) == (
        "unknown measure 'ochia'; did you mean 'ochiai'? (known: dstar, ochiai, tarantula)")
    # nothing close: the list alone, as before
    plain = unknown_name("measure", "zzz", ["dstar", "ochiai"])
    assert plain == "unknown measure 'zzz'; known: dstar, ochiai"


def test_case_alone_gets_that_name_and_ties_keep_the_known_order():
    assert did_you_mean("Ochiai", ["ochiai", "ochiai2"]) == ["ochiai"]
    assert did_you_mean("fc9", ["fc1", "fc2", "fc3", "conv"]) == ["fc1", "fc2", "fc3"]
    assert did_you_mean("", ["a"]) == []
    assert did_you_mean(None, ["a"]) == []
    assert did_you_mean("x", []) == []
    assert suggestion("mnst", ["cifar10", "mnist"]) == " (did you mean 'mnist'?)"
    assert suggestion("zzz", ["mnist"]) == ""


def test_a_registry_kind_names_the_users_word():
    shapes: Registry[int] = Registry("shape")
    shapes.register("square", 1)
    message = r"^unknown shape 'sqare'; did you mean 'square'\? \(known: square\)$"
    with pytest.raises(DeepFaultError, match=message):
        shapes.get("sqare")
    with pytest.raises(DeepFaultError, match=r"^unknown shape \['x'\]; known: square$"):
        shapes.get(["x"])  # an unhashable name: the list, no suggestion


@pytest.mark.parametrize(("call", "message"), [
    (lambda: __import__("deepfault.data", fromlist=["x"]).load_dataset("mnst"),
     "unknown data set 'mnst'; did you mean 'mnist'?"),
    (lambda: __import__("deepfault.models", fromlist=["x"]).build_model("lenet55"),
     "unknown architecture 'lenet55'; did you mean 'lenet5'"),
    (lambda: __import__("deepfault.coverage.rank", fromlist=["x"]).parse_by("ginni,margin"),
     "unknown prioritiser 'ginni'; did you mean 'gini'?"),
    (lambda: __import__("deepfault.coverage.measure", fromlist=["x"]).parse_criteria("nc,kmcn"),
     "unknown coverage criterion 'kmcn'; did you mean 'kmnc'?"),
    (lambda: __import__("deepfault.coverage.surprise", fromlist=["x"]).parse_kinds("lsaa"),
     "unknown surprise adequacy 'lsaa' (did you mean 'lsa'?)"),
    (lambda: __import__("deepfault.data.download", fromlist=["x"])._source("mnst"),
     "no download source for data set 'mnst' (did you mean 'mnist'?)"),
    (lambda: __import__("deepfault.core.capture", fromlist=["x"]).check_transform("layer-minmx"),
     "unknown transform 'layer-minmx'; did you mean 'layer-minmax'?"),
])
def test_lookups_that_are_no_registry_suggest_too(call, message):
    with pytest.raises(DeepFaultError) as info:
        call()
    assert message in str(info.value)
    assert "\n" not in str(info.value)
