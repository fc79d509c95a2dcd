"""The discrete-event engine: the only package that imports SimPy."""
from sim.engine.simulation import ENGINE_RULES, ReferencePaths, Simulation

__all__ = ["Simulation", "ReferencePaths", "ENGINE_RULES"]
