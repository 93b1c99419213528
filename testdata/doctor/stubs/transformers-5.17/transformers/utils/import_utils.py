# Stub of the bounds qwenref doctor's probe reads in transformers' utils/import_utils.py.
KERNELS_MIN_VERSION = "0.17.0"
KERNELS_MAX_VERSION = "0.18.0"
