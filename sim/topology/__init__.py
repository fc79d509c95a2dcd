"""Topologies: specs, NetworkX builders and routing."""
