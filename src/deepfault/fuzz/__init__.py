"""Regression fuzzing of a model's new version: DRFuzz and the DeepHunter baseline (``spec/drfuzz.md``).

- :mod:`.campaign`: the engine: the loop (:class:`~.campaign.loop.Campaign`,
  :func:`~.campaign.loop.run_campaign`), its configuration, seeds, steps, strategies
  (``drfuzz``, ``deephunter``), queue, oracle, metrics (#RF, #URF, #Seed, #GF), budget and
  checkpoints in the results store.
- :mod:`.mutation`: the 15 batched mutation rules, the rule choosers (MCMC) and the
  failure-tendency table.
- :mod:`.fidelity`: the checks of a mutant's realism (SSIM, the discriminator of
  :mod:`.fidelity.gan`, DeepHunter's validity).
- :mod:`.pairs`: the M1/M2 regression scenarios.
- :mod:`.regress` (``deepfault regress``, from model files), :mod:`.preset`
  (``drfuzz-mnist``), :mod:`.report`, :mod:`.figures`.

Examples:
    >>> import torch
    >>> from torch import nn
    >>> from deepfault.fuzz import run_campaign
    >>> _ = torch.manual_seed(0)
    >>> m1 = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    >>> m2 = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    >>> x = torch.rand(40, 1, 8, 8)
    >>> with torch.no_grad():
    ...     y = m1(x).argmax(1)
    >>> result = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), budget="50it", inputs_per_step=10, seed=0,
    ...                       fidelity="ssim")
    >>> sorted(result.metrics.to_dict())[:4]
    ['both_fail', 'gf', 'initial_rf', 'queries_to_first_rf']
"""


from ..experiment.method import Method
from ..experiment.report import section_report
from .campaign import (
    Campaign,
    CampaignConfig,
    CampaignOptions,
    CampaignProgress,
    CampaignResult,
    run_campaign,
)
from .campaign.budget import Budget, parse_budget
from .campaign.checkpoint import DRFUZZ_METHOD as _NAME
from .campaign.metrics import FaultTable, Metrics, compute_metrics
from .campaign.oracle import Bucket, classify
from .campaign.strategies import STRATEGIES, Strategy, get_strategy, list_strategies
from .preset import DRFUZZ_PRESETS
from .regress import RegressComparison, RegressOutcome, Versions, compare_strategies, regress

__all__ = [
    "METHOD",
    "Bucket",
    "Budget",
    "Campaign",
    "CampaignConfig",
    "CampaignOptions",
    "CampaignProgress",
    "CampaignResult",
    "FaultTable",
    "Metrics",
    "RegressComparison",
    "RegressOutcome",
    "STRATEGIES",
    "Strategy",
    "Versions",
    "classify",
    "compare_strategies",
    "compute_metrics",
    "get_strategy",
    "list_strategies",
    "parse_budget",
    "regress",
    "run_campaign",
]


#: DRFuzz as the engine sees it.
METHOD = Method(
    name=_NAME, title="DRFuzz",
    description="regression faults of a model's new version, by fuzzing both versions (and DeepHunter)",
    presets=DRFUZZ_PRESETS, result_type=CampaignResult, report=section_report(f"{__name__}.report"),
    commands=("gan", "scenario", "regress"), entries=(regress, compare_strategies),
    texts={
        "regress": (
            "fuzz a new version of a model (M2) for regression faults against M1 (DRFuzz)",
            "Mutate the test inputs that M1 classifies correctly and look for inputs that M1 still "
            "gets right and M2 gets wrong (regression faults), diverse and realistic (spec/drfuzz.md). "
            f"Strategies: {'; '.join(f'{n}: {STRATEGIES.get(n).description}' for n in STRATEGIES.names())}. "
            "Checkpoints go to --store every few seconds; rerunning the same command resumes (also after a "
            "crash or kill), or prints a finished campaign's result; it says which before any work, and "
            "--fresh starts over. Prints the metrics (#RF, #URF, #Seed, #GF, with a "
            "legend), writes the faults as .npz (the generated faults and, apart, the test inputs M2 already "
            "gets wrong), a PNG grid and the JSON result beside it, and ends with a verdict: levelled off, "
            "still climbing (a longer budget would likely find more), or too few faults to judge."),
        "gan train": (
            "train the discriminator and generator adversarially and write both",
            "Train the DCGAN of DRFuzz (spec/drfuzz.md section 6) on a data set's training split, with the "
            "images mapped to [-1, 1], and write the discriminator as a deepfault model file (its meta "
            "records input_range [-1, 1], which 'deepfault regress --fidelity discriminator:FILE' uses) and "
            "the generator beside it, and report its quality (mean score on real test images against noise "
            "and heavily mutated images). For mnist and fashion-mnist 'deepfault regress' makes one on first "
            "use without this step. Ctrl-C keeps the last completed epoch."),
        "scenario": (
            "write the M1/M2 model pair of a regression scenario (DRFuzz)",
            "Train M1 from the zoo and derive M2 as in DRFuzz's regression scenarios (spec/drfuzz.md section "
            "9): {scenarios}. 'all' runs every scenario. The base models are cached in --out and shared "
            "between scenarios with the same architecture, data, seed and epochs. Prints both test "
            "accuracies and the regressions (test inputs M1 gets right and M2 wrong). 'deploy' writes a "
            "deployment pair instead: M1 (--model, a float torch model) and the files it is deployed as, run "
            "by ONNX Runtime: float32 ONNX, dynamic int8 (ConvInteger/MatMulInteger), static QDQ int8 "
            "calibrated on training inputs, and float16 (--formats); fuzz one with 'deepfault regress --m1 "
            "M1.pt --m2 FILE.onnx --runtime onnxruntime'."),
    },
    renamed={"regress": {"--batch": "--inputs-per-step", "--criterion": "--criteria"},
             "scenario": {"--out-dir": "--out"}},
)
