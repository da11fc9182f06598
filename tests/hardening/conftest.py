from helpers.hardening import pair  # noqa: F401  (the shared files, as a fixture)
