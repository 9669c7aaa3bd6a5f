"""Accuracy: calibration and verification feeds, reference runs, and the comparison per output kind."""
