"""``llmsim whatif``: a workload moved across GPU systems, technology nodes and power caps."""
