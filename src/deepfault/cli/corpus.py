"""``deepfault corpus``: list, check or prune a regression corpus (docs/corpus.md)."""

from __future__ import annotations

from pathlib import Path

from ..corpus import Corpus
from ..corpus.corpus import CORPUS_COMMAND
from ..corpus.manifest import MANIFEST
from . import _common as c


def add_parser(sub) -> None:
    """Add ``deepfault corpus`` and its actions list, check and prune to ``sub``."""
    p = sub.add_parser("corpus", help=CORPUS_COMMAND[0], description=CORPUS_COMMAND[1])
    actions = p.add_subparsers(dest="corpus_command", metavar="ACTION")
    actions.required = True
    listing = actions.add_parser("list", help="the corpus's data set, shards and (with --entries) entries")
    listing.add_argument("corpus", type=c.READS_FOLDER, metavar="DIR", help="the corpus folder")
    listing.add_argument("--entries", action="store_true", help="one line per entry: id, label, method, run")
    listing.set_defaults(func=_cmd_list)
    check = actions.add_parser("check", help="read every shard against the manifest; exit 1 if one is "
                               "damaged")
    check.add_argument("corpus", type=c.READS_FOLDER, metavar="DIR", help="the corpus folder")
    check.set_defaults(func=_cmd_check)
    prune = actions.add_parser("prune", help="delete entries (all the criteria given must match), and the "
                               "files of killed adds")
    prune.add_argument("corpus", type=c.READS_FOLDER, metavar="DIR", help="the corpus folder")
    prune.add_argument("--ids", metavar="IDS", default=None,
                       help="comma-separated entry ids, or unique prefixes of at least 8 hex digits "
                       "('list --entries' shows them)")
    prune.add_argument("--before", metavar="TIME", default=None,
                       help="entries added before this time (ISO 8601, e.g. 2026-01-31; UTC unless it says)")
    prune.add_argument("--method", metavar="NAME", default=None,
                       help="entries found by this method (regress, xplore, run, gate)")
    prune.add_argument("--damaged", action="store_true",
                       help="drop the shards 'check' finds damaged (their entries cannot be read any more)")
    prune.set_defaults(func=_cmd_prune)


def _cmd_list(args) -> int:
    corpus = Corpus.open(args.corpus)
    print(corpus.describe())
    headers, rows = corpus.listing(entries=args.entries)
    if rows:
        print(c.table(headers, rows))
    return 0


def _cmd_check(args) -> int:
    corpus = Corpus.open(args.corpus)
    found = corpus.check()
    print(corpus.describe())
    print(found.summary(args.corpus))
    return 0 if found.ok else 1


def _cmd_prune(args) -> int:
    corpus = Corpus.open(args.corpus, check_shards=not args.damaged)  # --damaged: the way out of one
    ids = None if args.ids is None else [i for i in (part.strip() for part in args.ids.split(",")) if i]
    removed = corpus.prune(ids=ids, before=args.before, method=args.method, damaged=args.damaged)
    print(f"corpus prune: {removed} entries deleted, {len(corpus)} left")
    return 0


# --- --corpus DIR on the commands that find failing inputs --------------------------------------


def add_corpus_option(p, what: str) -> None:
    """Add ``--corpus DIR``: the corpus folder the command adds ``what`` to."""
    p.add_argument("--corpus", type=c.WRITES_FOLDER, metavar="DIR", default=None,
                   help=f"add {what} to this regression corpus (made where it does not exist; "
                   "'deepfault corpus list DIR' shows it, 'deepfault gate' replays it)")


def corpus_output(args) -> c.Output:
    """``--corpus DIR`` among a command's declared outputs: a folder it makes or fills."""
    folder = getattr(args, "corpus", None)
    return c.Output("--corpus", None if folder is None else Path(folder), folder=True)


def check_corpus_option(args, dataset: str | None = None) -> None:
    """Before any work: ``--corpus DIR`` (when given) can take the finds of a run on ``dataset``
    (:meth:`~deepfault.corpus.RegressionCorpus.check_destination`).
    """
    if getattr(args, "corpus", None) is not None:
        Corpus.check_destination(args.corpus, dataset)


def add_to_corpus(args, findings) -> None:
    """Add what a run found to ``--corpus DIR`` (when given) and say how many were new."""
    if getattr(args, "corpus", None) is None or findings is None:
        return
    added = findings.add_to(args.corpus)
    total = len(Corpus.open(args.corpus)) if added or (Path(args.corpus) / MANIFEST).exists() else 0
    print(f"corpus {args.corpus}: {added} new of {len(findings)} found ({total} entries)")
