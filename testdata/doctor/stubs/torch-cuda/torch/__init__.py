"""Stub torch for qwenref doctor's tests: CUDA 13.0 with one H200 (sm_90)."""
import types

__version__ = "2.11.0+cu130"
version = types.SimpleNamespace(cuda="13.0", hip=None)


class cuda:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def get_device_name(i=0):
        return "NVIDIA H200"

    @staticmethod
    def get_device_capability(i=0):
        return (9, 0)

    @staticmethod
    def get_arch_list():
        return ["sm_80", "sm_90", "sm_100", "sm_120"]
