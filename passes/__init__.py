"""Passes over hlo programs (see the registry)."""
