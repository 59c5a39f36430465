"""``python -m eqsat``: the same as the ``eqsat`` command."""

from eqsat.cli import main

raise SystemExit(main())
