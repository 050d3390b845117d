"""fedforget: federated fine-tuning of PEFT modules that can forget exactly."""

__version__ = "0.1.0"
