// lint-only: intentionally empty (see ../cuda_runtime.h)
