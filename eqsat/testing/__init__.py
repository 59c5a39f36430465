"""Tools for testing eqsat, shared by the tests and the benchmarks: the differential fuzzer (``eqsat.testing.fuzz``)
and the ONNX model builder for test graphs (``eqsat.testing.onnx_builders``).
Imports anything in eqsat; nothing in eqsat's pipeline imports it."""
