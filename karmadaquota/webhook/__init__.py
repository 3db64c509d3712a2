"""The admission webhook: charges ResourceBindings against KarmadaQuotas at admission."""
