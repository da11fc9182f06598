"""``deepfault data``: list or download data sets."""

from __future__ import annotations

from ..data import default_data_dir
from ..data.download import download
from ..data.listing import DATA_COMMAND, dataset_states, listed_root
from . import _common as c


def add_parser(sub) -> None:
    """Add ``deepfault data`` and its actions list and download to ``sub``."""
    data = sub.add_parser("data", help=DATA_COMMAND[0], description=DATA_COMMAND[1])
    data_sub = data.add_subparsers(dest="data_command", metavar="ACTION")
    data_sub.required = True
    dlist = data_sub.add_parser("list", help="each data set and whether its files are here and intact")
    c.add_options(dlist, "data_dir")
    dlist.set_defaults(func=_cmd_data_list)
    dl = data_sub.add_parser("download", help="fetch a data set's official files and verify them")
    dl.add_argument("name", help="data set name")
    c.add_options(dl, "data_dir")
    dl.add_argument("--force", action="store_true", help="fetch again even when verified")
    c.add_options(dl, "no_progress")
    dl.set_defaults(func=_cmd_data_download)


def _cmd_data_list(args) -> int:
    root = listed_root(args.data_dir)
    print(f"data root: {root}")
    print(c.table(("name", "status", "what"), dataset_states(root), indent=""))
    return 0


def _cmd_data_download(args) -> int:
    for path in download(args.name, default_data_dir(args.data_dir), force=args.force,
                         progress=not args.no_progress):
        print(f"ok {path}")
    return 0
