"""Stage 3 of the flow: evidence, the stored ``kernelpolicy verify`` results that the engine reads.

An input of the engine beside the platform and the policies (``verified = true`` asks for it):
``store`` keeps one file per platform key and library versions, ``schema`` checks its shape,
``model`` holds the results as the suite reports them. Nothing here imports torch.
"""
