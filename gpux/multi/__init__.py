"""Several gpux.yml projects run as one: a workspace file, the providers they all offer, one saved choice,
and pipelines that wire one model's outputs into the next one's inputs."""
