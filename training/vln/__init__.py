"""AlldayWalker training: imitation + DAgger in the simulator (``train.py``), and the lifelong task loop.

Importing this package loads ``torch._dynamo`` (and with it triton's native library) up front: loading triton's
LLVM after MuJoCo created an EGL context (Mesa llvmpipe, its own LLVM) segfaults the process, and transformers
pulls triton in lazily on its first model import, often after the first rendered frame.
"""

import torch._dynamo  # noqa: F401 - must precede the first EGL context (see above)
