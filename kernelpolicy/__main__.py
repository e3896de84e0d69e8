import sys

from kernelpolicy.cli import main

sys.exit(main())
