"""The installed package's version (one place, so that the engine need not import the package root)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("deepfault")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"
