"""`python -m orcd ...` is the `orcd` command."""

import sys

from orcd.cli.main import main

sys.exit(main())
