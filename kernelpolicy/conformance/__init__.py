"""Stage 5 of the flow: conformance checks whose results become evidence for the engine.

``evidence`` (no torch) is what the engine reads; ``suite`` and the check modules need torch
and scipy (the ``verify`` extra) and are imported only by ``kernelpolicy verify``.
"""
