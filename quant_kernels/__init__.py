"""Low-bit quantization: the pure-PyTorch reference, STaMP, SERQ, Triton kernels and ONNX export (issue #4)."""
