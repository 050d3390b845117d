"""Tasks: offline data sets, partitions and slices, frozen backbones with peft LoRA modules."""
