"""Studies made of many simulations: design-space sweeps, what-if studies, comparisons, validation."""
