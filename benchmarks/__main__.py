"""`python3 -m benchmarks NAME ...`: the same as `python3 launcher.py bench NAME ...` (for machines without the launcher's venv)."""
import sys

from benchmarks import main

sys.exit(main(sys.argv[1:]))
