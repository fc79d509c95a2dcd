"""What a run gives the user: the report, the breakdown, traces, plots and files."""
