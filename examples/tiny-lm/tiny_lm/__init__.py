"""A Flower app that fine-tunes a small pretrained language model with LoRA, so any text can be forgotten exactly."""
