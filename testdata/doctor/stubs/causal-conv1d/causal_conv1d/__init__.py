"""Stub causal_conv1d for qwenref doctor's tests."""
__version__ = "1.6.0"


def causal_conv1d_fn(x, weight, bias=None, activation=None, **kwargs):
    pass


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None):
    pass
