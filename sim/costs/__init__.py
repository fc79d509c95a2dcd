"""Cost models: how long an op takes, behind one protocol (:class:`sim.costs.base.CostModel`)."""
