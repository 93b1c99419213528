"""Stub kernels (the Hugging Face hub-kernel loader) for qwenref doctor's tests."""
