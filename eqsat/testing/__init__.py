"""Tools for testing eqsat, shared by the tests and the benchmarks: the differential fuzzer and model builders.
Imports anything in eqsat; nothing in eqsat's pipeline imports it."""
