"""Stub fla for qwenref doctor's tests (fla-core 0.5.2 layout)."""
__version__ = "0.5.2"
