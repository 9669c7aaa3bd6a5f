"""The version of gpux: a constant of the ground floor, imported by whatever records or prints it."""

__version__ = "0.1.0"
