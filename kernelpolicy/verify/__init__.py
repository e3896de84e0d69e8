"""Stage 6 of the flow, a front end: the suite behind ``kernelpolicy verify``.

It runs the implementations that can run here (``suite``) through robustness and distribution
checks for samplers (``samplers``, ``distribution``, on ``patterns`` of damaged logits against
the exact ``reference``) and accuracy checks (``accuracy``), full or quick (``profile``); its
results become the evidence of stage 3 (:mod:`kernelpolicy.evidence`). Needs torch and scipy
(the ``verify`` extra); imported only by ``kernelpolicy verify``.
"""
