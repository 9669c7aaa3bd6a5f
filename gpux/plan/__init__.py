"""What to try before anything is built: the provider choice, the targets each needs, the multi-model offer."""
