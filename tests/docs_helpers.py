"""scripts/gen_docs.py loaded as a module (``gen_docs``): the documentation tests run its
transcripts and read its blocks (tests/test_docs.py, tests/test_cli_docs.py)."""

from __future__ import annotations

import importlib.util
import sys

from tests.helpers import ROOT

_spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts/gen_docs.py")
assert _spec is not None
assert _spec.loader is not None
gen_docs = importlib.util.module_from_spec(_spec)
sys.modules["gen_docs"] = gen_docs
_spec.loader.exec_module(gen_docs)
