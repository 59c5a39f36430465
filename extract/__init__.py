"""Extraction of a cheapest acyclic term DAG from a serialized e-graph (extraction-gym JSON)."""
