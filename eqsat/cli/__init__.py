"""The ``eqsat`` command line. The top of the import graph: it may import any package, and none imports it."""

from eqsat.cli.app import main

__all__ = ["main"]
