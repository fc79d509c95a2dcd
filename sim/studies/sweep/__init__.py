"""``llmsim sweep``: the design-space search, its bounds, its memory check and its report."""
