"""A module whose import fails, for ``verify --entry`` (tests/test_cli_errors.py): importing an
entry runs its module's code, and any failure there is the answer."""

raise RuntimeError("boom at import")
