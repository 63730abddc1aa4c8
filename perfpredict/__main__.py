"""`python -m perfpredict` runs the command line."""

from __future__ import annotations

import sys

from perfpredict.cli import main

sys.exit(main())
