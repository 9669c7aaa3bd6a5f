"""`gpux serve`: the Open Inference Protocol (KServe v2 / Triton) over REST and gRPC, with dynamic batching."""
