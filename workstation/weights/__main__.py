"""`python -m workstation.weights fetch MODEL ...`: how the UI starts a fetch in a process of its own."""
import sys

from workstation.cli import main

sys.exit(main(["weights", *sys.argv[1:]]))
