"""Stage 6 of the flow: the daemon (``kernelpolicy serve``) and its client (``connect``).

Front-ends only render a Resolution; the daemon never works an answer out a second time.
Importing this package imports nothing; grpc loads with ``daemon`` and ``client``.
"""
