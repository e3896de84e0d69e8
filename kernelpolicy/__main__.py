import sys

if sys.argv[1:2] == ["serve"]:
    # Before anything slow: a SIGHUP during start-up must not end the daemon.
    from kernelpolicy.server.signals import hold_sighup

    hold_sighup()

from kernelpolicy.cli import main  # after the signal handler, on purpose

sys.exit(main())
