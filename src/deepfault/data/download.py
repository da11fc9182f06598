"""Where the public data sets come from, whether they are here intact, and fetching them.

One table, :data:`SOURCES`, names every official file with its mirrors, md5 and size.
:func:`dataset_status` checks what lies under a data root; :func:`download` fetches what
is missing. A file is first written beside its final place and moved there only once
its md5 is right, so an interrupted or corrupted download never looks like data.

Examples:
    >>> from .download import dataset_status
    >>> [s.present for s in dataset_status("mnist", "/nonexistent")]
    [False, False, False, False]
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, NamedTuple

from ..core.registry import suggestion
from ..errors import DeepFaultError
from .paths import default_data_dir

if TYPE_CHECKING:
    import tarfile

__all__ = [
    "RemoteFile",
    "LocalFile",
    "DatasetSource",
    "FileStatus",
    "SOURCES",
    "dataset_status",
    "download",
    "md5sum",
    "fetch_hint",
]

log = logging.getLogger(__name__)

#: ``transport(url, dest_path)`` writes the body of ``url`` to ``dest_path``.
Transport = Callable[[str, Path], None]


@dataclass(frozen=True)
class RemoteFile:
    """A file as published: its name, md5, size in bytes and the URLs that serve it."""

    name: str
    md5: str
    size: int | None
    urls: tuple[str, ...]


@dataclass(frozen=True)
class LocalFile:
    """A file the loader reads, relative to the data set folder, with its md5.

    ``alt_name``/``alt_md5`` describe an equivalent form the loader also accepts
    (the uncompressed IDX file beside the official ``.gz``).
    """

    name: str
    md5: str
    alt_name: str | None = None
    alt_md5: str | None = None


@dataclass(frozen=True)
class DatasetSource:
    """Everything needed to fetch one data set into ``data_dir / folder``.

    Attributes:
        name: Registry name.
        folder: Folder under the data root that the ``remote`` files go to.
        remote: The files to download.
        local: The files the loader reads, relative to ``folder``; the same as
            ``remote`` unless ``archive`` is set.
        archive: Whether the single remote file is a tarball to extract into ``folder``.
    """

    name: str
    folder: str
    remote: tuple[RemoteFile, ...]
    local: tuple[LocalFile, ...]
    archive: bool = False


class FileStatus(NamedTuple):
    """One file of a data set: where it is expected, whether it exists, whether its md5
    matches the official one.
    """

    file: Path
    present: bool
    verified: bool


_MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
_FASHION_MIRRORS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
_SVHN_URL = "http://ufldl.stanford.edu/housenumbers/"


def _idx(mirrors, rows):
    remote = tuple(
        RemoteFile(f"{n}.gz", md5, size, tuple(m + f"{n}.gz" for m in mirrors)) for n, md5, size, _ in rows
    )
    local = tuple(LocalFile(f"{n}.gz", md5, n, raw_md5) for n, md5, _, raw_md5 in rows)
    return remote, local


# fmt: off
# (stem, md5 of the official .gz, its size, md5 of the uncompressed file)
_MNIST = _idx(_MNIST_MIRRORS, [
    ("train-images-idx3-ubyte", "f68b3c2dcbeaaa9fbdd348bbdeb94873", 9912422, "6bbc9ace898e44ae57da46a324031adb"),  # noqa: E501
    ("train-labels-idx1-ubyte", "d53e105ee54ea40749a09fcbcd1e9432", 28881, "a25bea736e30d166cdddb491f175f624"),  # noqa: E501
    ("t10k-images-idx3-ubyte", "9fb629c4189551a2d022fa330f9573f3", 1648877, "2646ac647ad5339dbf082846283269ea"),  # noqa: E501
    ("t10k-labels-idx1-ubyte", "ec29112dd5afa0611ce80d1b7f02629c", 4542, "27ae3e4e09519cfbb04c329615203637"),  # noqa: E501
])
_FASHION = _idx(_FASHION_MIRRORS, [
    ("train-images-idx3-ubyte", "8d4fb7e6c68d591d4c3dfef9ec88bf0d", 26421880, "f4a8712d7a061bf5bd6d2ca38dc4d50a"),  # noqa: E501
    ("train-labels-idx1-ubyte", "25c81989df183df01b3e8a0aad5dffbe", 29515, "9018921c3c673c538a1fc5bad174d6f9"),  # noqa: E501
    ("t10k-images-idx3-ubyte", "bef4ecab320f06d8554ea6380940ec79", 4422102, "8181f5470baa50b63fa0f6fddb340f0a"),  # noqa: E501
    ("t10k-labels-idx1-ubyte", "bb300cfdad3c16e7a12a480ee83cd310", 5148, "15d484375f8d13e6eb1aabb0c3f46965"),  # noqa: E501
])
# fmt: on

#: The official files of every downloadable data set, by registry name.
SOURCES: dict[str, DatasetSource] = {
    "mnist": DatasetSource("mnist", "MNIST/raw", *_MNIST),
    "fashion-mnist": DatasetSource("fashion-mnist", "FashionMNIST/raw", *_FASHION),
    "cifar10": DatasetSource(
        "cifar10",
        "",
        (
            RemoteFile(
                "cifar-10-python.tar.gz",
                "c58f30108f718f92721af3b95e74349a",
                170498071,
                ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
            ),
        ),
        (
            LocalFile("cifar-10-batches-py/data_batch_1", "c99cafc152244af753f735de768cd75f"),
            LocalFile("cifar-10-batches-py/data_batch_2", "d4bba439e000b95fd0a9bffe97cbabec"),
            LocalFile("cifar-10-batches-py/data_batch_3", "54ebc095f3ab1f0389bbae665268c751"),
            LocalFile("cifar-10-batches-py/data_batch_4", "634d18415352ddfa80567beed471001a"),
            LocalFile("cifar-10-batches-py/data_batch_5", "482c414d41f54cd18b22e5b47cb7c3cb"),
            LocalFile("cifar-10-batches-py/test_batch", "40351d587109b95175f43aff81a1287e"),
            LocalFile("cifar-10-batches-py/batches.meta", "5ff9c542aee3614f3951f8cda6e48888"),
        ),
        archive=True,
    ),
    "svhn": DatasetSource(
        "svhn",
        "svhn",
        (
            RemoteFile(
                "train_32x32.mat",
                "e26dedcc434d2e4c54c9b2d4a06d8373",
                182040794,
                (_SVHN_URL + "train_32x32.mat",),
            ),
            RemoteFile(
                "test_32x32.mat",
                "eb5a983be6a315427106f1b164d9cef3",
                64275384,
                (_SVHN_URL + "test_32x32.mat",),
            ),
        ),
        (
            LocalFile("train_32x32.mat", "e26dedcc434d2e4c54c9b2d4a06d8373"),
            LocalFile("test_32x32.mat", "eb5a983be6a315427106f1b164d9cef3"),
        ),
    ),
}


def _source(name: str) -> DatasetSource:
    try:
        return SOURCES[name]
    except KeyError:
        raise DeepFaultError(
            f"no download source for data set {name!r}{suggestion(name, sorted(SOURCES))}; "
            f"downloadable: {', '.join(sorted(SOURCES))}"
        ) from None


def fetch_hint(name: str) -> str:
    """The command that fetches data set ``name``, for error messages."""
    return f"`deepfault data download {name}`"


def md5sum(path: str | os.PathLike, *, chunk_size: int = 1 << 20) -> str:
    """The hex md5 digest of a file, read in chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def _folder(source: DatasetSource, root: Path) -> Path:
    return root / source.folder if source.folder else root


def dataset_status(name: str, data_dir: str | os.PathLike | None = None) -> list[FileStatus]:
    """Check the files that the loader of data set ``name`` reads.

    Each file counts as present if it exists, and verified if its md5 is the official one.
    For MNIST and Fashion-MNIST an uncompressed IDX file stands in for a missing ``.gz``.
    SVHN files are also looked for directly in ``data_dir``, as the loader does.

    Args:
        name: A key of :data:`SOURCES`.
        data_dir: The data root; ``None`` for :func:`deepfault.data.default_data_dir`.

    Returns:
        One :class:`FileStatus` per file, in table order.

    Raises:
        DeepFaultError: ``name`` has no download source.
    """
    source = _source(name)
    root = default_data_dir(data_dir)
    folder = _folder(source, root)
    out = []
    md5: str | None
    for local in source.local:
        path, md5 = folder / local.name, local.md5
        if not path.is_file() and local.alt_name and (folder / local.alt_name).is_file():
            path, md5 = folder / local.alt_name, local.alt_md5
        if not path.is_file() and name == "svhn" and (root / local.name).is_file():
            path = root / local.name
        present = path.is_file()
        out.append(FileStatus(path, present, present and md5 is not None and md5sum(path) == md5))
    return out


def _urllib_transport(url: str, dest: Path, *, progress: bool = False) -> None:
    """Write the body of ``url`` to ``dest``, with a bar over its bytes when ``progress``."""
    import urllib.request

    request = urllib.request.Request(url, headers={"User-Agent": "deepfault"})
    with urllib.request.urlopen(request, timeout=60) as response, open(dest, "wb") as fh:
        if not progress:
            shutil.copyfileobj(response, fh, length=1 << 20)
            return
        from ..core.progress import progress_bar

        total = int(response.headers.get("Content-Length") or 0) or None
        shown = dest.name  # atomic_path's ".NAME.PID.XXXX.tmp" shows as NAME
        if shown.startswith(".") and shown.endswith(".tmp"):
            shown = shown[1:].rsplit(f".{os.getpid()}.", 1)[0]
        bar = progress_bar(total, desc=f"download {shown}", unit="B")
        try:
            while chunk := response.read(1 << 20):
                fh.write(chunk)
                bar.update(len(chunk))
        finally:
            bar.close()


class _BadDownload(Exception):
    pass


def _fetch(remote: RemoteFile, dest: Path, transport: Transport) -> None:
    """Download ``remote`` to ``dest`` trying each mirror; ``dest`` appears only if intact."""
    from .._io import atomic_path

    problems = []
    for url in remote.urls:
        log.info("downloading %s to %s", url, dest)
        try:
            with atomic_path(dest) as tmp:
                transport(url, tmp)
                size = tmp.stat().st_size
                if remote.size is not None and size != remote.size:
                    raise _BadDownload(f"{size:,} bytes instead of {remote.size:,}")
                got = md5sum(tmp)
                if got != remote.md5:
                    raise _BadDownload(f"md5 {got} instead of {remote.md5}")
            return
        except _BadDownload as err:
            problems.append(f"{url}: {err}")
        except OSError as err:
            problems.append(f"{url}: {err}")
        log.warning("download of %s failed: %s", remote.name, problems[-1])
    raise DeepFaultError(
        f"could not download {remote.name} intact ({'; '.join(problems)}); nothing was written "
        f"to {dest}; check the connection and retry, or fetch it by hand and place it there"
    )


def _safe_members(tar: tarfile.TarFile, archive: Path):
    """Refuse archive members that would land outside the target or are not plain."""
    for member in tar.getmembers():
        parts = PurePosixPath(member.name).parts
        if member.name.startswith(("/", "\\")) or ".." in parts or not (member.isfile() or member.isdir()):
            raise DeepFaultError(
                f"refusing to extract {archive}: unsafe member {member.name!r}; "
                "delete the archive and download it again"
            )
    return tar.getmembers()


def _extract(archive: Path, folder: Path, local: tuple[LocalFile, ...]) -> None:
    """Extract ``archive`` into a temporary folder, check the md5 of the files the loader
    reads, then move them into ``folder``.
    """
    import tarfile

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".extract-", dir=folder) as tmp:
        try:
            with tarfile.open(archive, "r:*") as tar:
                members = _safe_members(tar, archive)
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(tmp, members=members, filter="data")
                else:  # pragma: no cover - Python without PEP 706 backports
                    tar.extractall(tmp, members=members)
        except (tarfile.TarError, OSError, EOFError) as err:
            raise DeepFaultError(f"cannot extract {archive}: {err}; delete it and download it again") from err
        for item in local:
            src = Path(tmp) / item.name
            if not src.is_file():
                raise DeepFaultError(f"{archive} lacks {item.name}; delete it and download it again")
            if md5sum(src) != item.md5:
                raise DeepFaultError(
                    f"{item.name} in {archive} has the wrong md5 (expected {item.md5}); "
                    "delete the archive and download it again"
                )
        for item in local:
            dest = folder / item.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(Path(tmp) / item.name, dest)


def download(
    name: str,
    data_dir: str | os.PathLike | None = None,
    *,
    transport: Transport | None = None,
    force: bool = False,
    progress: bool = False,
) -> list[Path]:
    """Fetch the official files of data set ``name`` into ``data_dir``, checking md5s.

    Files already present with the right md5 are kept unless ``force``. Each file is
    written to a temporary name beside its destination and moved into place only when
    its size and md5 match; a failed mirror is followed by the next. The CIFAR-10 tarball
    is extracted with tarfile's ``data`` filter after refusing absolute paths, ``..`` and
    links, and its batches are checked before they are moved into place.

    Args:
        name: A key of :data:`SOURCES` (``mnist``, ``fashion-mnist``, ``cifar10``, ``svhn``).
        data_dir: The data root; ``None`` for :func:`deepfault.data.default_data_dir`.
        transport: ``transport(url, dest_path)`` writing the body of ``url`` to
            ``dest_path``; defaults to urllib. Tests pass a fake one.
        force: Download even when intact files are present.
        progress: A bar over each file's bytes (bars on a terminal, lines in a log) with the
            default transport.

    Returns:
        The paths of the files the loader reads, all verified.

    Raises:
        DeepFaultError: ``name`` has no source, or a file could not be fetched intact from
            any mirror (nothing is left in its place), or the archive is unsafe or corrupt.
    """
    source = _source(name)
    root = default_data_dir(data_dir)
    folder = _folder(source, root)
    if transport is None:
        transport = functools.partial(_urllib_transport, progress=progress)
    local_paths = [folder / item.name for item in source.local]
    if not force and all(
        p.is_file() and md5sum(p) == item.md5 for p, item in zip(local_paths, source.local, strict=True)
    ):
        log.info("%s is already present and verified in %s", name, folder)
        return local_paths
    # Folders this call creates are removed again if it fails, so a failed download leaves
    # nothing behind ("nothing was written" must be true).
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        for remote in source.remote:
            dest = folder / remote.name
            if force or not (dest.is_file() and md5sum(dest) == remote.md5):
                _fetch(remote, dest, transport)
            if source.archive:
                _extract(dest, folder, source.local)
    except BaseException:
        for path in created:  # deepest first
            with contextlib.suppress(OSError):
                path.rmdir()  # only when empty
        raise
    return local_paths
