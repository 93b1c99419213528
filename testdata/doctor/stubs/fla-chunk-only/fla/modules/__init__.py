class FusedRMSNormGated:
    pass
