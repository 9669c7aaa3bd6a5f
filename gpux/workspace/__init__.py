"""Several gpux.yml projects run as one: each model's derived settings, one saved choice, and pipelines that
wire one model's outputs into the next one's inputs (the workspace file itself: gpux.config.workspace)."""
