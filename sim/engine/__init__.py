"""The discrete-event engine: the only package that imports SimPy."""
from sim.engine.simulation import Simulation

__all__ = ["Simulation"]
