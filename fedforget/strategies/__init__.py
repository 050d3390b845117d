"""One module per method, each driving Flower's Grid."""
