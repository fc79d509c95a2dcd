"""Studies made of many simulations: design-space sweeps, what-if studies, comparisons, validation;
the leave-one-source-out analysis of a validation run's rows (:mod:`sim.studies.loso`); a profiled
layer against its simulation (:mod:`sim.studies.layer_profile`)."""
