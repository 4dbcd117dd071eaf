"""`python -m kernelopt ...`: the same as the `kernelopt` command."""

import sys

from kernelopt.cli import main

sys.exit(main())
