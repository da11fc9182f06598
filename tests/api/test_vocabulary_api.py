"""One vocabulary (issue 27): every option of a computing command is an argument of the API
function (or its configuration) that the command calls, under the same name, except for the
documented exceptions below (docs/api.md, "One vocabulary"). Old API names still work and warn.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import warnings

import pytest

import deepfault as df
from deepfault.cli import build_parser
from deepfault.core.executors import Parallel
from deepfault.core.runtime import Runtime
from deepfault.fuzz import Versions
from deepfault.fuzz.campaign import CampaignConfig
from deepfault.models.prepare import PrepareOptions
from deepfault.repair import RepairConfig
from deepfault.xplore import XploreConfig

#: Each command and the API it calls: functions (their parameters) and configurations
#: (their fields). prepare_model's PrepareOptions holds the options that open a model file
#: (regress's Versions, for its pair); Runtime how a call runs, and its Parallel the workers a
#: pass spreads over (Runtime(parallel=Parallel(workers=...))).
PREPARE = [df.prepare_model, PrepareOptions]
API = {
    "run": [df.run_deepfault, df.RunConfig, df.Runtime, Parallel, *PREPARE],
    "xplore": [df.xplore, XploreConfig, df.Runtime, Parallel, *PREPARE],
    "regress": [df.regress, CampaignConfig, Versions, Runtime],
    "gate": [df.gate, df.GateConfig, Versions, Runtime, Parallel],
    "repair": [df.repair, RepairConfig, df.Runtime, *PREPARE],
    "coverage measure": [df.measure_coverage, df.CoverageConfig, df.Runtime, Parallel, *PREPARE],
    "coverage rank": [df.rank_inputs, df.CoverageConfig, df.Runtime, Parallel, *PREPARE],
    "coverage profile": [df.compute_profile, df.ProfileConfig, df.Runtime, Parallel, *PREPARE],
    "coverage surprise": [df.fit_surprise, df.SurpriseConfig, df.Runtime, Parallel, *PREPARE],
}

#: Options of every command with no API argument of that name, and why.
EVERY_COMMAND = {
    "out": "the command's result file; the API returns the result (its to_dict() is the file's body)",
    "report": "the command's HTML page; the API's results have summary() and to_dict()",
    "no_progress": "the API's progress=False is the default; progress=True shows the command's bar",
    "device": "the API runs where the model is (model.to(device) first)",
    "dataset": "prepare_model(model, data=...), regress(models, data) and repair(dataset=...) take a name, "
    "file or the data",
    "grid": "an image file of the command's",
    "plot": "an image file of the command's",
    "log": "a log file of the command's",
    "quiet": "terminal output of the command's",
    "split": "which split of a named data set the command reads; the API takes the inputs themselves",
    "models_dir": "where the command looks up zoo names; the API takes models",
    "arch_args": "JSON text on the command line; the API takes the dict itself as arch_kwargs=",
    "corpus": "the folder the command adds its findings to; in the API outcome.findings().add_to(folder)",
}

#: Options of one command whose API argument has another name, and why.
EXCEPTIONS = {
    ("run", "class"): "class is a Python keyword: RunConfig(classes=...)",
    ("run", "raw_gradients"): "a negated switch: RunConfig(normalize=False)",
    ("run", "inputs"): "inputs is the data argument everywhere in the API: RunConfig(num_inputs=...)",
    ("run", "k_prime"): "takes several values: RunConfig(k_primes=(...))",
    ("run", "save_inputs"): "a file of the command's; RunResult holds the synthesized inputs",
    ("run", "no_save_inputs"): "a file of the command's",
    ("run", "no_surprise"): "a negated switch: RunConfig(surprise=None)",
    ("xplore", "feature_bounds"): "a word (auto, observed, dataset) or a file on the command line; the API "
    "takes the arrays themselves as bounds=(lo, hi)",
    ("xplore", "fix_features"): "index text on the command line; the API takes fixed= (indices or a mask)",
    ("xplore", "fix_steps"): "index text on the command line; the API's fixed= mask covers time steps too",
    ("repair", "m1"): "M1 goes with the model: repair((model, m1), found, config)",
    ("repair", "save_model"): "a file of the command's: result.outputs() writes the repaired model",
    ("run", "no_baseline"): "a negated switch of --report's baseline: RunConfig(baseline=False)",
    ("xplore", "num_seeds"): "XploreConfig(seeds=...): num_seeds is its property, the run's count",
    ("xplore", "constraint"): "XploreConfig(transform=...): constraint() is its method that builds it",
    ("xplore", "compat"): "XploreConfig.published(...) gives the published settings",
    ("xplore", "surprise"): "the command's extra pass; fit_surprise/surprise_scores in the API",
    ("xplore", "no_surprise"): "the command's extra pass",
    ("regress", "sections"): "the criterion's parameter: CampaignConfig(criterion_params={'sections': N})",
    ("regress", "threshold"): "the criterion's parameter: CampaignConfig(criterion_params={'threshold': T})",
    ("gate", "no_heldout"): "a negated switch: GateConfig(heldout=False)",
    ("gate", "no_add_to_corpus"): "a negated switch: GateConfig(add_to_corpus=False)",
    ("gate", "allow_significantly_worse"): "a negated switch: GateConfig(not_significantly_worse=False)",
    ("gate", "policy"): "a file of the command's: deepfault.gate.policy_config(path) makes the GateConfig",
    ("gate", "junit"): "a file of the command's: GateOutcome.outputs() writes it",
    ("gate", "summary"): "a file of the command's: GateOutcome.outputs() writes it",
}


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name, command in sub.choices.items():
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            out.update({f"{name} {n}": c for n, c in nested[0].choices.items()})
        else:
            out[name] = command
    return out


def _api_names(command: str) -> set[str]:
    names: set[str] = set()
    for api in API[command]:
        if dataclasses.is_dataclass(api):
            names |= {f.name for f in dataclasses.fields(api)}
        else:
            names |= set(inspect.signature(api).parameters)
    return names


def _option_names(command: str) -> list[str]:
    parser = _commands()[command]
    return [next(o for o in a.option_strings if o.startswith("--"))[2:].replace("-", "_")
            for a in parser._actions
            if any(o.startswith("--") for o in a.option_strings) and a.dest != "help"]


@pytest.mark.parametrize("command", sorted(API))
def test_every_option_is_an_api_argument_of_the_same_name(command):
    names = _api_names(command)
    wrong = [o for o in _option_names(command)
             if o not in names and o not in EVERY_COMMAND and (command, o) not in EXCEPTIONS]
    assert not wrong, f"{command}: options with no API argument of the same name: {wrong}"


def test_every_exception_is_still_needed():
    """An exception whose option now matches (or is gone) is removed from the list."""
    stale = [(c, o) for (c, o) in EXCEPTIONS if o in _api_names(c) or o not in _option_names(c)]
    assert not stale


OLD_NAMES = [
    (lambda **kw: df.RunConfig(**kw), "approach", "measure", "ochiai"),
    (lambda **kw: df.RunConfig(**kw), "step", "step_size", 0.5),
    (lambda **kw: XploreConfig(**kw), "step", "step_size", 0.5),
    (lambda **kw: XploreConfig(**kw), "batch_size", "inputs_per_step", 3),
    (lambda **kw: CampaignConfig(**kw), "batch", "inputs_per_step", 3),
    (lambda **kw: CampaignConfig(**kw), "criterion", "criteria", "nc"),
]


@pytest.mark.parametrize(("make", "old", "new", "value"), OLD_NAMES)
def test_old_config_names_warn_and_still_work(make, old, new, value):
    with pytest.warns(FutureWarning, match=rf"\({old}=\.\.\.\) is deprecated: use {new}="):
        config = make(**{old: value})
    assert getattr(config, new) == value
    assert getattr(config, old) == value  # still readable
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(make(**{new: value}), new) == value  # the new name: no warning


def test_result_files_keep_their_keys():
    """The renamed fields are written under their old keys: older files and store keys stay valid."""
    d = df.RunConfig(measure="ochiai", step_size=0.5).to_dict()
    assert d["approach"] == "ochiai"
    assert d["step"] == 0.5
    assert "measure" not in d
    c = CampaignConfig(inputs_per_step=3, criteria="nc")
    back = CampaignConfig.from_dict(c.to_dict())
    assert (back.inputs_per_step, back.criteria, back.key()) == (3, "nc", c.key())
    assert c.to_dict()["batch"] == 3
    assert c.to_dict()["criterion"] == "nc"
    assert XploreConfig(step_size=0.5).to_dict()["step"] == 0.5


def test_old_function_names_warn_and_still_work(chain):
    import torch

    x = torch.rand(6, 4, generator=torch.Generator().manual_seed(0))
    sel = df.localize(df.compute_spectrum(chain, x, torch.zeros(6, dtype=torch.long)), k=1)
    with pytest.warns(FutureWarning, match=r"synthesize\(step=\.\.\.\) is deprecated: use step_size="):
        old = df.synthesize(chain, x, sel, step=0.5)
    torch.testing.assert_close(old, df.synthesize(chain, x, sel, step_size=0.5))


def test_both_names_at_once_are_refused():
    with pytest.raises(df.DeepFaultError, match="give measure= only"):
        df.RunConfig(measure="ochiai", approach="dstar")


def test_neuron_fields_and_the_tables_columns():
    """Neuron keeps a_s, a_f, n_s, n_f (``as`` is a Python keyword); to_dict() writes the
    tables' words.
    """
    n = df.Neuron("fc1", 0, 0, 1.0, 1, 2, 3, 4)
    assert (n.a_s, n.a_f, n.n_s, n.n_f) == (1, 2, 3, 4)
    assert {"as", "af", "ns", "nf"} <= set(n.to_dict())
