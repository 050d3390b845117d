"""A Flower app that fine-tunes its own tabular MLP with fedforget, so any record can be forgotten exactly."""
