"""Hand-offs to engines that schedule replicas across machines: Triton repositories, KServe, Ray Serve."""
