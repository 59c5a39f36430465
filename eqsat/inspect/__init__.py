"""E-graph dumps a user can inspect: the saturated e-graph of a run with costs and the choice, its statistics and
drawings. Imports ``eqsat.engine``, ``eqsat.extract``, ``eqsat.ir``."""

from eqsat.inspect.dump import DumpError, EGraphDump, build_dump, is_dump, load_json

__all__ = ["DumpError", "EGraphDump", "build_dump", "is_dump", "load_json"]
