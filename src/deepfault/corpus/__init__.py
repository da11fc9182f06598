"""The regression corpus: the failing inputs of earlier runs, kept to replay on every new model.

A corpus is a folder: append-only ``.npz`` shards of inputs with their expected labels and
provenance, behind a manifest (``corpus.json``) that is replaced atomically. ``regress``,
``xplore``, ``run`` and ``gate`` add what they find (``--corpus DIR``); ``gate`` replays it.
See docs/corpus.md for the format and the guarantees.

Example (``inputs``, ``labels`` and ``model`` are the caller's)::

    from deepfault.corpus import Corpus, Provenance
    corpus = Corpus.open("corpus", create=True, dataset="mnist", input_shape=(1, 28, 28))
    corpus.add(inputs, labels, Provenance("regress", "drfuzz-seed0", ("m1.pt", "m2.onnx")))
    for batch in corpus.batches(256):
        predictions = model(batch.inputs).argmax(1)
"""

from .corpus import CorpusBatch, CorpusCheck, RegressionCorpus
from .corpus import RegressionCorpus as Corpus
from .findings import Findings
from .ids import entry_ids
from .manifest import Manifest
from .provenance import Provenance
from .shard import ShardRecord

__all__ = ["Corpus", "RegressionCorpus", "CorpusBatch", "CorpusCheck", "Findings", "Provenance", "Manifest",
           "ShardRecord", "entry_ids"]
