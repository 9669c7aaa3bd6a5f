"""A model file's facts: real inputs/outputs, compatibility with the installed runtime, feeds cast to it."""
