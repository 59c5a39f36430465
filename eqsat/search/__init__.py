"""The research baselines: rules matched on IR graphs one at a time (no e-graph), TASO's backtracking and OCGGS's
sampling search, and ``compare`` against eqsat. Imports ``eqsat.pipeline`` and below."""
