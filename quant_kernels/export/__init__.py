"""Export of quantized models (ONNX: QDQ int4/int8 and com.microsoft MatMulNBits)."""
