"""What every method shares to run a federation: messaging, the failure policy, node discovery, store
preparation, forget propagation, module shipping and serving. Nothing here names a method."""
