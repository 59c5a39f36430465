"""Cost models: analytic roofline, measured onnxruntime (CPU) and CuPy (GPU), with a disk cache."""
