"""``python -m deepfault``: the command line, :func:`deepfault.cli.main`."""

import sys

from .cli import main

sys.exit(main())
