"""SERQ: static activation flattening, saliency ordering and one low-rank residual on the r salient channels."""

from quant_kernels.methods.serq.method import SERQ

__all__ = ["SERQ"]
