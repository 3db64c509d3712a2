"""The admission webhook: charges ResourceBindings against KarmadaQuotas (DESIGN §5)."""
