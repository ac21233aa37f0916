"""`python -m workstation ARGS`: the launcher's commands in an environment that already holds the workstation
(a plugin's own tests run it so, through contracts.testing.Workstation), without the launcher's bootstrap."""
import sys

from workstation.cli import main

sys.exit(main())
