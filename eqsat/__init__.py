"""eqsat: an ONNX tensor-graph superoptimizer by equality saturation."""
