def chunk_gated_delta_rule(q, k, v, g, beta, **kwargs):
    pass
