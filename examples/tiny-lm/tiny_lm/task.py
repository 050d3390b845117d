"""The app's own language model: the first two decoder layers of SmolLM2-135M (pretrained), its own tied LM head,
LoRA on the attention's ``q_proj`` and ``v_proj`` and on the LM head, trained with the language-model loss,
perplexity as its metric.

The model predicts the next token over a fixed vocabulary: the tokenizer's first ``VOCABULARY - 1`` tokens (the
most frequent of its training corpus) and one ``OTHER`` class for the rest, so that what is served per text stays
small. The vocabulary depends on no record: a forgotten text leaves no trace in the model's shape.

``head=False``: the model's output is already the logits (its LM head), so fedforget adds no head; the LoRA modules
alone train. ``targets``: each position's target is the next token (-100 past the text's end), so the records are
texts without labels.
"""

from functools import lru_cache

import numpy as np
import torch
from torch import nn

from fedforget.client import Task

LAYERS, VOCABULARY, MAX_TOKENS = 2, 4096, 32
OTHER = VOCABULARY - 1  # every token id at or above it
IGNORE = -100  # a position with no next token (torch's ignore_index)


@lru_cache(maxsize=1)
def model_dir() -> str:
    """SmolLM2-135M's weights, config and tokenizer as fedforget's set-up converted them (safetensors); an app of
    your own names its own model folder here."""
    from fedforget.tasks.smollm import smollm_path

    return str(smollm_path())


@lru_cache(maxsize=1)
def tokenizer():  # noqa: ANN201 - a transformers tokenizer
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir())
    tok.pad_token = tok.pad_token or tok.eos_token
    tok.padding_side = "right"
    return tok


class TinyLM(nn.Module):
    """``forward(input_ids, attention_mask) -> (batch, tokens, VOCABULARY)`` next-token logits."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import AutoConfig, AutoModel
        from transformers.utils import logging

        logging.set_verbosity_error()  # the checkpoint's other 28 layers are left out on purpose
        logging.disable_progress_bar()
        config = AutoConfig.from_pretrained(model_dir(), num_hidden_layers=LAYERS, use_cache=False)
        self.decoder = AutoModel.from_pretrained(model_dir(), config=config, dtype=torch.float32)
        embedding = self.decoder.embed_tokens.weight.detach()
        # the tied LM head over the fixed vocabulary; OTHER's row is the mean of the rows it stands for. Named
        # "unembed": peft reads a LoRA target named "lm_head" as an embedding layer whose weights it saves whole
        rows = torch.cat([embedding[:OTHER], embedding[OTHER:].mean(dim=0, keepdim=True)])
        self.unembed = nn.Linear(rows.shape[1], VOCABULARY, bias=False)
        with torch.no_grad():
            self.unembed.weight.copy_(rows)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.unembed(hidden)


def encode(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Texts -> (input_ids, attention_mask), right-padded to ``MAX_TOKENS``."""
    out = tokenizer()(list(texts), max_length=MAX_TOKENS, padding="max_length", truncation=True, return_tensors="pt")
    return out["input_ids"].to(torch.int64), out["attention_mask"].to(torch.int64)


def next_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Position t's target: token t + 1 in the fixed vocabulary; none (-100) after the text's last token."""
    targets = torch.full_like(input_ids, IGNORE)
    following = input_ids[:, 1:].clamp(max=OTHER)
    targets[:, :-1] = following.masked_fill(attention_mask[:, 1:] == 0, IGNORE)
    return targets


def language_model_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of each next token."""
    return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


def perplexity(probabilities: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """exp of the mean negative log-likelihood of the next tokens (probabilities: records × tokens × vocabulary)."""
    kept = targets != IGNORE
    picked = probabilities[kept][np.arange(int(kept.sum())), targets[kept]]
    return {"perplexity": float(np.exp(-np.log(np.clip(picked, 1e-12, 1.0)).mean()))}


TASK = Task(
    name="tiny-lm",
    backbone=TinyLM,
    feature_dim=VOCABULARY,  # the model's output is the logits
    num_classes=VOCABULARY,
    lora_targets=["q_proj", "v_proj", "unembed"],
    head=False,
    input_column="text",
    encode=encode,
    targets=next_tokens,
    loss=language_model_loss,
    metric=perplexity,
    simulation_data="data/node-{partition}",  # a simulated node's train.parquet and test.parquet
    source="SmolLM2-135M-Instruct, its first 2 decoder layers and tied LM head over 4,096 tokens",
)
