"""Operator axioms, rule generator, Z3 verifier and the committed rule corpus."""
