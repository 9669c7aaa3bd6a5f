"""Running models elsewhere: container images (`gpux package`: image, wheel, docker), Triton repositories and
ensembles, KServe manifests, Ray Serve."""
