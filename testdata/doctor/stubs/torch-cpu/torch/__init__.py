"""Stub torch for qwenref doctor's tests: a CPU-only build."""
import types

__version__ = "2.11.0+cpu"
version = types.SimpleNamespace(cuda=None, hip=None)


class cuda:
    @staticmethod
    def is_available():
        return False

    @staticmethod
    def device_count():
        return 0

    @staticmethod
    def get_arch_list():
        return []
