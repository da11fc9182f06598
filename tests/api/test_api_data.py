"""Every public entry point that takes data takes what PyTorch users have (issue 27).

One parametrised test per entry point: the call with a ``DataLoader`` (labels from its
batches) gives what the call with tensors and explicit labels gives, computed in the same
run. A wrong type is a one-line ``DeepFaultError`` at entry.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import deepfault as df
from deepfault.errors import DeepFaultError
from helpers.float_tolerance import assert_close_two_ways, assert_orders_agree, surprise_condition
from helpers.tiny_models import chain_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N = 36


def _data(n=N, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 4, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return x, y


def _loader(x, y, batch_size=7):
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)


def _same(a, b):
    """Results equal up to floating-point rounding (batches of another size)."""
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, np.ndarray):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for u, v in zip(a, b, strict=True):
            _same(u, v)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    else:
        assert a == b


def _selection(model, x, y):
    return df.localize(df.compute_spectrum(model, x, y, target_class=1), k=2)


def _repair_file(tmp_path, x, y):
    """A run-style input file: perturbed copies of three test inputs, labelled by theirs."""
    seeds = np.array([0, 1, 2, 3, 4, 5], dtype=np.int64)
    synth = np.clip(x.numpy()[seeds] + 0.01, 0, 1).astype(np.float32)
    path = tmp_path / "run.npz"
    np.savez(path, synthesized=synth, originals=x.numpy()[seeds], labels=y.numpy()[seeds], test_index=seeds,
             pred_original=np.zeros(len(seeds), int), pred_synthesized=np.zeros(len(seeds), int),
             target_class=y.numpy()[seeds], repetition=np.zeros(len(seeds), int))
    return path


def _summary(result):  # noqa: C901 - one case per kind of result
    """What an entry point's result is compared by."""
    if isinstance(result, (torch.Tensor, np.ndarray)):
        return result
    if isinstance(result, df.Spectrum):
        return (result.a_s, result.a_f, result.n_s, result.n_f)
    if isinstance(result, dict) and result and isinstance(next(iter(result.values())), df.Spectrum):
        return {k: _summary(v) for k, v in result.items()}
    if isinstance(result, df.RunResult):
        return (result.test_accuracy, [(c.target_class, c.num_correct, _summary(c.spectrum),
                                        [r.selection.to_dict()["neurons"] for r in c.repetitions])
                                       for c in result.classes])
    if hasattr(result, "results") and hasattr(result, "layout"):  # a coverage report
        return [(r.label, r.covered, r.total) for r in result.results]
    if hasattr(result, "rankings"):
        return [(r.name, r.order.tolist()) for r in result.rankings]
    if hasattr(result, "scores") and hasattr(result, "predictions"):
        return (result.scores, result.predictions)
    if hasattr(result, "result") and hasattr(result, "experiment"):  # regress
        return result.result.metrics.rf
    if hasattr(result, "found") and hasattr(result, "before"):  # repair
        return (result.before.held_out, result.found.after.held_out)
    if hasattr(result, "verdict") and hasattr(result, "heldout"):  # gate
        h = result.heldout
        return (result.verdict, h.inputs, h.negative_flips, h.positive_flips, h.disagree)
    if hasattr(result, "num_found"):  # xplore
        return (result.num_found, result.found.seed_index.tolist())
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], df.NeuronLayout):
        return result[1]
    if isinstance(result, df.Evaluation):
        return (result.loss, result.correct, result.pred_synthesized)
    if isinstance(result, df.NeuronLayout):
        return result.names
    if hasattr(result, "layout") and hasattr(result, "mean"):  # a profile
        return (result.count, result.mean)
    if hasattr(result, "ats"):  # a surprise state
        return np.asarray(result.ats)
    return result


def _entry_points(tmp_path):
    """name -> call(model, data, labels or None): every public entry point that takes data."""
    x, y = _data()
    m2 = chain_model(seed=1)
    sel = lambda m: _selection(m, x, y)  # noqa: E731
    synth = lambda m: df.synthesize(m, x[:5], sel(m), distance=0.05)  # noqa: E731
    surprise = lambda m: df.fit_surprise(m, x, y, classes="labels")  # noqa: E731
    tiny = {"budget": "12it", "inputs_per_step": 4, "seed": 0, "fidelity": "linf:0.3", "max_seeds": 12}
    return {
        "predict": lambda m, d, lab: df.predict(m, d),
        "activations": lambda m, d, lab: df.activations(m, d),
        "iterate_batches": lambda m, d, lab: torch.cat([b.outputs
                                                        for b in df.iterate_batches(m, d, labels=lab)]),
        "inputs_and_labels": lambda m, d, lab: df.inputs_and_labels(d, lab),
        "correct_inputs": lambda m, d, lab: df.correct_inputs(m, d, lab, cls=1)[2],
        "compute_spectrum": lambda m, d, lab: df.compute_spectrum(m, d, lab, target_class=1),
        "compute_class_spectra": lambda m, d, lab: df.compute_class_spectra(m, d, lab, [0, 2]),
        "measure_coverage": lambda m, d, lab: df.measure_coverage(m, d, criteria="nc,tknc"),
        "compute_profile": lambda m, d, lab: df.compute_profile(m, d),
        "rank_inputs": lambda m, d, lab: df.rank_inputs(m, d, lab, by="gini,margin"),
        "fit_surprise": lambda m, d, lab: df.fit_surprise(m, d, lab, classes="labels"),
        "surprise_scores": lambda m, d, lab: df.surprise_scores(m, d, surprise(m)),
        "synthesize": lambda m, d, lab: df.synthesize(m, d, sel(m), distance=0.05),
        "evaluate": lambda m, d, lab: df.evaluate(m, d, synth(m), lab, sel(m)),
        "xplore": lambda m, d, lab: df.xplore([m, m2], d, config=_xplore_config(), bounds=(0.0, 1.0)),
        "run_deepfault": lambda m, d, lab: df.run_deepfault(
            m, d, df.RunConfig(k=2, classes=(0, 1)), labels=lab, bounds=(0.0, 1.0)),
        "regress": lambda m, d, lab: df.regress(m, m2, dataset=d, labels=lab, **tiny),
        "repair": lambda m, d, lab: df.repair(m, _repair_file(tmp_path, x, y), dataset=d, labels=lab,
                                              epochs=1, baselines=(), mix=4),
        "gate": lambda m, d, lab: df.gate((m, m2), d if lab is None else (d, lab), df.GateConfig(budget="0")),
    }


def _xplore_config():
    from deepfault.xplore import XploreConfig

    return XploreConfig(seeds=4, iterations=2, layers="deepxplore")


#: Entry points whose data is the first five inputs (synthesis starts from originals).
_FIRST_FIVE = {"synthesize", "evaluate"}

#: Entry points whose float results are one forward pass's, at the loader's batches of 7 against
#: the array's: compared by the float32 tolerance of chain_model's sums, fc1 (4 + 1 terms), fc2
#: (6 + 1), fc3 (5 + 1) and the logits (4 + 1); fc3 (the surprise layer) the first 18 of them.
_FORWARD = {"predict": 23, "activations": 23, "iterate_batches": 23, "compute_profile": 23,
            "rank_inputs": 23, "fit_surprise": 18, "surprise_scores": 18}


def _same_forward(entry, got, want, x, y):
    n, f32 = _FORWARD[entry], torch.float32
    if entry == "rank_inputs":
        for r, s in zip(got.rankings, want.rankings, strict=True):
            assert r.name == s.name
            atol = assert_close_two_ways(r.scores, s.scores, n=n, dtype=f32, err_msg=r.name)
            assert_orders_agree(s.order, r.order, s.scores, atol=atol, err_msg=r.name)
    elif entry == "compute_profile":  # a mean of the values: relative to the values' magnitude
        assert got.count == want.count
        scale = float(max(np.abs(want.low).max(), np.abs(want.high).max()))
        assert_close_two_ways(got.mean, want.mean, n=n, dtype=f32, scale=scale, err_msg="mean")
    elif entry == "fit_surprise":
        np.testing.assert_array_equal(got.classes, want.classes)  # the labels
        assert_close_two_ways(got.ats, want.ats, n=n, dtype=f32, err_msg="ats")
    elif entry == "surprise_scores":
        state = df.fit_surprise(chain_model(), x, y, classes="labels")
        np.testing.assert_array_equal(got.predictions, want.predictions)
        for kind in want:
            condition = 1.0 if kind == "dsa" else surprise_condition(state.ats, state.classes)
            assert_close_two_ways(got[kind], want[kind], n=n, dtype=f32, condition=condition, err_msg=kind)
    else:
        assert_close_two_ways(_summary(got), _summary(want), n=n, dtype=f32, err_msg=entry)



def _names():
    import inspect

    src = inspect.getsource(_entry_points)
    return [line.split('"')[1] for line in src.splitlines()
            if line.strip().startswith('"') and '": lambda' in line]


@pytest.mark.parametrize("entry", [pytest.param(name, marks=pytest.mark.float_sensitive) if name in _FORWARD
                                   else name for name in _names()])
def test_every_entry_point_takes_a_dataloader(entry, tmp_path):
    x, y = _data()
    if entry in _FIRST_FIVE:
        x, y = x[:5], y[:5]
    call = _entry_points(tmp_path)[entry]
    want = call(chain_model(), x, y)
    got = call(chain_model(), _loader(x, y), None)
    if entry in _FORWARD:
        _same_forward(entry, got, want, x, y)
    else:
        _same(_summary(got), _summary(want))


def test_the_entry_points_are_every_public_function_that_takes_data():
    """A new public function that takes data joins the test above (or the list below)."""
    import inspect

    takes = {"inputs", "data", "originals", "dataset"}
    no_data = {"capture", "make_criterion", "prepare_model", "uncertainty_scores", "load_dataset"}
    found = {n for n in df.__all__ if callable(getattr(df, n)) and not inspect.isclass(getattr(df, n))
             and takes & set(inspect.signature(getattr(df, n)).parameters)}
    assert found - no_data <= set(_names())


@pytest.mark.parametrize("form", ["numpy", "tensordataset", "pair", "deepfault"])
def test_other_forms_give_the_same_spectrum(form):
    x, y = _data()
    data = {"numpy": x.numpy(), "tensordataset": TensorDataset(x, y), "pair": (x, y),
            "deepfault": df.Dataset("t", x.numpy(), y.numpy(), x.numpy(), y.numpy(), (0.0, 1.0),
                                    ("a", "b", "c"))}[form]
    lab = y.numpy() if form == "numpy" else None
    got = df.compute_spectrum(chain_model(), data, lab, target_class=2)
    want = df.compute_spectrum(chain_model(), x, y, target_class=2)
    _same(_summary(got), _summary(want))


def test_explicit_labels_win_over_the_loaders():
    x, y = _data()
    other = (y + 1) % 3
    got = df.compute_spectrum(chain_model(), _loader(x, y), other, target_class=0)
    want = df.compute_spectrum(chain_model(), x, other, target_class=0)
    _same(_summary(got), _summary(want))


def test_rank_inputs_counts_inputs_not_batches():
    x, y = _data()
    report = df.rank_inputs(chain_model(), _loader(x, y), by="gini")
    assert report.ranking("gini").order.shape == (N,)


@pytest.mark.parametrize("entry", ["predict", "measure_coverage", "compute_spectrum", "run_deepfault",
                                   "rank_inputs", "synthesize", "regress", "repair", "xplore"])
@pytest.mark.parametrize("bad", ["mnist", {"x": 1}, 3])
def test_a_wrong_type_is_one_line_at_entry(entry, bad, tmp_path):
    if entry in ("regress", "repair") and isinstance(bad, str):
        pytest.skip("a string is a data set's name there")
    call = _entry_points(tmp_path)[entry]
    with pytest.raises(DeepFaultError, match=r"must be a tensor, a numpy array.*; got (str|dict|int)") as err:
        call(chain_model(), bad, None)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("entry", ["measure_coverage", "compute_spectrum", "compute_profile", "predict"])
def test_a_loader_is_streamed_where_the_method_streams(entry):
    """The model sees the first batch before the loader's last item is read: the loader is
    not stacked into one tensor first.
    """
    x, y = _data()
    events = []

    class Logged(TensorDataset):
        def __getitem__(self, i):
            events.append("item")
            return super().__getitem__(i)

    model = chain_model()
    model.register_forward_pre_hook(lambda m, a: events.append("forward"))
    loader = DataLoader(Logged(x, y), batch_size=5)
    call = {"measure_coverage": lambda: df.measure_coverage(model, loader, criteria="nc"),
            "compute_spectrum": lambda: df.compute_spectrum(model, loader, target_class=1),
            "compute_profile": lambda: df.compute_profile(model, loader),
            "predict": lambda: df.predict(model, loader)}[entry]
    call()
    assert events.count("item") == N
    assert events.index("forward") < len(events) - 1 - events[::-1].index("item")


def test_bounds_default_to_the_unit_range_or_the_datas_own():
    from deepfault.data import as_dataset

    x, y = _data()
    assert as_dataset(_loader(x, y)).bounds == (0.0, 1.0)
    d = as_dataset(_loader(x * 4 - 2, y))
    assert d.bounds == (pytest.approx(float((x * 4 - 2).min())), pytest.approx(float((x * 4 - 2).max())))
    assert as_dataset(_loader(x, y), bounds=(-1, 1)).bounds == (-1.0, 1.0)
    with pytest.raises(DeepFaultError, match="carries no labels"):
        as_dataset(x)
