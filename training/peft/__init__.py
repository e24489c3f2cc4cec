"""Parameter-efficient fine-tuning building blocks (framework-free torch)."""
