"""Stub fla whose import fails, as fla does when Triton cannot build its driver helper."""
raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")
