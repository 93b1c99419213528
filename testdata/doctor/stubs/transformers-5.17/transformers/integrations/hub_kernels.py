# Stub of what qwenref doctor's probe reads in transformers 5.17's integrations/hub_kernels.py.
_KERNELS_INTERNAL_PATH_MAPPINGS = {
    "chunk_gated_delta_rule": "ops.gated_delta_rule",
    "fused_recurrent_gated_delta_rule": "ops.gated_delta_rule",
}


def _build_kernel_mapping():
    return {
        "causal_conv1d_fn": {"cuda": "kernels-community/mamba-ssm"},
        "causal_conv1d_update": {"cuda": "kernels-community/mamba-ssm"},
        "chunk_gated_delta_rule": {"cuda": "kernels-community/fla"},
        "fused_recurrent_gated_delta_rule": {"cuda": "kernels-community/fla"},
    }
