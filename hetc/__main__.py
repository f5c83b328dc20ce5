"""`python -m hetc` runs the command line."""

from hetc.cli import main

main()
