"""One module per backend: how to build its artifact and how to open a runner on it."""
