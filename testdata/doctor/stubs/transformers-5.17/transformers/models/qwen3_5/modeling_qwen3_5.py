# Stub of the seams qwenref doctor's probe reads in transformers 5.17's modeling_qwen3_5.py:
# the four functions wrapped by use_kernel_func_from_hub_with_fallback(name, package).
from ...integrations import use_kernel_func_from_hub_with_fallback


@use_kernel_func_from_hub_with_fallback("causal_conv1d_update", "causal_conv1d")
def causal_conv1d_update(hidden_states, conv_state, weight, bias=None, activation=None):
    pass


@use_kernel_func_from_hub_with_fallback("causal_conv1d_fn", "causal_conv1d")
def causal_conv1d_fn(hidden_states, weight, bias=None, activation=None, **kwargs):
    pass


@use_kernel_func_from_hub_with_fallback("chunk_gated_delta_rule", "fla")
def torch_chunk_gated_delta_rule(query, key, value, g, beta, **kwargs):
    pass


@use_kernel_func_from_hub_with_fallback("fused_recurrent_gated_delta_rule", "fla")
def torch_recurrent_gated_delta_rule(query, key, value, g, beta, **kwargs):
    pass
