"""``python -m perfpredict.cli`` runs the command line (as ``python -m perfpredict`` does)."""

from __future__ import annotations

import sys

from perfpredict.cli.entry import main

sys.exit(main())
