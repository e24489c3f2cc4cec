"""allday agents: policies (VLA, VLN) and the shared core types.

Importing this package is light: it must not pull in torch-heavy optional stacks, rclpy or triton.
"""

__all__ = ["core"]
