"""Split models for HO-SFL and the split baselines: the task's peft model cut after block k.

The client part ``f_c`` holds the first ``cut`` blocks of the frozen backbone with their LoRA
adapters (its trainable parameters are θ_c); the server part ``f_s`` holds the remaining blocks,
their LoRA adapters and the head (θ_s). Both parts come from one :class:`TaskModel` built from the
task's seeded init, so a client and the server that build the same config start from the same bits.

Every block maps a tuple ``(tensor, *aux)`` to a tuple: vision blocks carry nothing else, text
blocks carry the attention mask (the server needs it for its own layers and for pooling, so it
travels with the activations). The backbone is in eval mode (no dropout, no BatchNorm updates), so
the client part is a deterministic function of (x, θ_c).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedforget.core.config import ConfigError, RunConfig, model_task
from fedforget.methods.hosfl.config import SPLIT_MAX_CUT, split_tasks
from fedforget.tasks.peft_modules import TaskModel, build_task_model
from fedforget.tasks.registry import get_task

Carry = tuple[torch.Tensor, ...]


class Block(nn.Module):
    """One stage of a backbone: ``fn(modules, *carry) -> carry``; holds references to the layers."""

    def __init__(self, layers: dict[str, nn.Module], fn: Callable[..., Carry]) -> None:
        super().__init__()
        self.layers = nn.ModuleDict(layers)
        self.fn = fn

    def forward(self, *carry: torch.Tensor) -> Carry:
        return self.fn(self.layers, *carry)


class Part(nn.Module):
    """A run of blocks, optionally followed by the head (server part)."""

    def __init__(self, blocks: Sequence[Block], head: nn.Module | None = None) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.head = head

    def forward(self, *carry: torch.Tensor) -> torch.Tensor | Carry:
        for block in self.blocks:
            carry = block(*carry)
        if self.head is not None:
            return self.head(carry[0])
        return carry


def _pool2(x: torch.Tensor) -> torch.Tensor:
    return torch.max_pool2d(x, 2)


def _mlp_blocks(mlp: nn.Module) -> list[Block]:
    return [
        Block({"fc1": mlp.fc1}, lambda m, x: (torch.relu(m["fc1"](x.flatten(1))),)),
        Block({"fc2": mlp.fc2}, lambda m, h: (torch.relu(m["fc2"](h)),)),
    ]


def _cnn_blocks(cnn: nn.Module) -> list[Block]:
    return [
        Block({"conv1": cnn.conv1}, lambda m, x: (_pool2(torch.relu(m["conv1"](x))),)),
        Block({"conv2": cnn.conv2}, lambda m, h: (_pool2(torch.relu(m["conv2"](h))),)),
        Block({"fc1": cnn.fc1}, lambda m, h: (torch.relu(m["fc1"](h.flatten(1))),)),
    ]


def _minilm_blocks(encoder: nn.Module) -> list[Block]:
    """Embeddings, one block per transformer layer, then masked-mean pooling (no parameters)."""
    from transformers.masking_utils import create_bidirectional_mask

    from fedforget.tasks.text import masked_mean

    bert = encoder.transformer
    config = bert.config

    def embed(m: nn.ModuleDict, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Carry:
        return m["emb"](input_ids=input_ids), attention_mask

    def layer(m: nn.ModuleDict, hidden: torch.Tensor, attention_mask: torch.Tensor) -> Carry:
        mask = create_bidirectional_mask(config=config, inputs_embeds=hidden, attention_mask=attention_mask)
        return m["layer"](hidden, mask), attention_mask

    def pool(m: nn.ModuleDict, hidden: torch.Tensor, attention_mask: torch.Tensor) -> Carry:
        return (masked_mean(hidden, attention_mask),)

    return [Block({"emb": bert.embeddings}, embed),
            *[Block({"layer": lay}, layer) for lay in bert.encoder.layer],
            Block({}, pool)]


def _decoder_blocks(wrapper: nn.Module) -> list[Block]:
    """SmolLM (LLaMA): embeddings, one block per decoder layer, then the final norm and last-token read.

    Every layer block rebuilds what ``LlamaModel.forward`` computes once for all layers: positions
    0..L-1, the rotary (cos, sin) tables and the causal mask combined with the padding mask. They are
    functions of (hidden's shape, attention mask) only, so nothing but the hidden states and the mask
    crosses the cut, and client part + server part compute exactly the full decoder.
    """
    from transformers.masking_utils import create_causal_mask

    from fedforget.tasks.smollm import last_token

    decoder = wrapper.decoder
    config = decoder.config

    def embed(m: nn.ModuleDict, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Carry:
        return m["emb"](input_ids), attention_mask

    def layer(m: nn.ModuleDict, hidden: torch.Tensor, attention_mask: torch.Tensor) -> Carry:
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        mask = create_causal_mask(config=config, inputs_embeds=hidden, attention_mask=attention_mask,
                                  past_key_values=None, position_ids=positions)
        rotary = m["rotary"](hidden, position_ids=positions)
        return m["layer"](hidden, attention_mask=mask, position_ids=positions, position_embeddings=rotary), \
            attention_mask

    def head(m: nn.ModuleDict, hidden: torch.Tensor, attention_mask: torch.Tensor) -> Carry:
        return (last_token(m["norm"](hidden), attention_mask),)

    return [Block({"emb": decoder.embed_tokens}, embed),
            *[Block({"layer": lay, "rotary": decoder.rotary_emb}, layer) for lay in decoder.layers],
            Block({"norm": decoder.norm}, head)]


def _blocks(task: str, backbone: nn.Module, cut: int) -> tuple[list[Block], list[Block]]:
    task = model_task(task)  # a task variant splits its model the same way
    if task == "digits-mlp":
        blocks = _mlp_blocks(backbone)
        return blocks[:cut], blocks[cut:]
    if task == "fmnist-cnn":
        blocks = _cnn_blocks(backbone)
        return blocks[:cut], blocks[cut:]
    if task == "rt-minilm":
        blocks = _minilm_blocks(backbone)  # [embeddings, layer 0..5, pool]
        return blocks[: 1 + cut], blocks[1 + cut :]
    if task == "rt-smollm":
        blocks = _decoder_blocks(backbone)  # [embeddings, layer 0..29, norm + last token]
        return blocks[: 1 + cut], blocks[1 + cut :]
    raise ConfigError(f"no split model for task {task!r}; use one of: {', '.join(split_tasks())}")


@dataclass
class SplitModel:
    """``server(*client(*inputs)) == full model(*inputs)``, with θ_c / θ_s as named trainable params."""

    client: Part
    server: Part
    full: TaskModel

    def __post_init__(self) -> None:
        self.client_params: list[tuple[str, nn.Parameter]] = [
            (n, p) for n, p in self.client.named_parameters() if "lora_" in n
        ]
        client_ids = {id(p) for _, p in self.client_params}
        self.server_params: list[tuple[str, nn.Parameter]] = [
            (n, p) for n, p in self.server.named_parameters() if p.requires_grad and id(p) not in client_ids
        ]
        if not self.client_params:
            raise ConfigError("the client part has no LoRA parameters; move the cut deeper (run-config 'hosfl.cut')")
        for _, p in self.client_params:
            p.requires_grad_(False)  # the client never back-propagates in HO-SFL (SFL differentiates a copy)
        #: θ_c^0 and θ_s^0 from the seeded init; every replica starts here.
        self.initial_client = self.client_vector()
        self.initial_server = self.server_state()

    @property
    def client_names(self) -> list[str]:
        return [n for n, _ in self.client_params]

    @property
    def d_c(self) -> int:
        return sum(p.numel() for _, p in self.client_params)

    @property
    def d_s(self) -> int:
        return sum(p.numel() for _, p in self.server_params)

    def client_vector(self) -> torch.Tensor:
        """θ_c flattened in the client part's parameter order (float32, a CPU copy)."""
        return torch.cat([p.detach().reshape(-1).cpu() for _, p in self.client_params]).clone()

    def load_client_vector(self, theta: torch.Tensor) -> None:
        if theta.numel() != self.d_c:
            raise ValueError(f"client state has {theta.numel()} values, this split model needs {self.d_c}")
        with torch.no_grad():
            for (_, p), chunk in zip(self.client_params, self.split_vector(theta), strict=True):
                p.copy_(chunk)

    def split_vector(self, theta: torch.Tensor) -> list[torch.Tensor]:
        """A flat θ_c vector cut into tensors shaped like the client parameters (views)."""
        out, start = [], 0
        for _, p in self.client_params:
            out.append(theta[start : start + p.numel()].view_as(p))
            start += p.numel()
        return out

    def server_state(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.server_params}

    def to(self, device: torch.device) -> SplitModel:
        """Both parts on ``device`` (θ_c^0 and θ_s^0 stay the CPU copies taken at build time); a client's
        empty server shell (meta tensors) stays where it is."""
        if device.type == "cpu":
            return self
        self.client.to(device)
        if not any(p.is_meta for p in self.server.parameters()):
            self.server.to(device)
        return self

    def load_server_state(self, state: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for n, p in self.server_params:
                p.copy_(state[n])

    def load_artifact(self, arrays: Mapping[str, np.ndarray]) -> None:
        """θ_c and θ_s from a stored split artifact (``client.<name>``, ``server.<name>``), so what is
        served is rebuilt from the stored bytes alone, whatever state this model held before."""
        with torch.no_grad():
            for prefix, params in (("client", self.client_params), ("server", self.server_params)):
                for n, p in params:
                    p.copy_(torch.from_numpy(np.array(arrays[f"{prefix}.{n}"], copy=True)))


class Composite(nn.Module):
    """[θ_c; θ_s] as one model: what the run evaluates and what a split store serves."""

    def __init__(self, split: SplitModel) -> None:
        super().__init__()
        self.split = split

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        device = next(self.split.server.parameters()).device
        return self.split.server(*self.split.client(*(x.to(device) for x in inputs))).cpu()


def build_split_model(cfg: RunConfig, num_classes: int, role: str = "server") -> SplitModel:
    """The task's peft model from its seeded init, cut after ``cfg.hosfl.cut`` blocks.

    ``role='client'`` on rt-smollm reads only the client part's weights (embeddings and the first
    ``cut`` layers); the server part is then an empty shell the client never runs. The LoRA init of
    the client layers comes first in the seeded stream, so θ_c^0 is the same bits in both roles.
    """
    if model_task(cfg.task) not in SPLIT_MAX_CUT:
        raise ConfigError(f"no split model for task {cfg.task!r}; use one of: {', '.join(split_tasks())}")
    if model_task(cfg.task) == "rt-smollm" and role == "client":
        from fedforget.tasks.smollm import client_backbone

        backbone = client_backbone(cfg.hosfl.cut)
    else:
        backbone = get_task(cfg.task).load_backbone(cfg, cfg.seed)
    model = build_task_model(backbone, num_classes, cfg.lora_r, cfg.lora_alpha, cfg.seed)
    model.eval()
    inner = model.body.base_model.model  # the backbone module with LoRA layers injected
    client_blocks, server_blocks = _blocks(cfg.task, inner, cfg.hosfl.cut)
    return SplitModel(Part(client_blocks), Part(server_blocks, head=model.head), model)


def split_device(cfg: RunConfig) -> torch.device:
    """Where split models run their forwards: ``device='auto'`` is CUDA when one is visible.

    Only forwards and the server's backward move; θ_c, its directions and its updates stay on the CPU,
    so a replica's θ_c has the same bits on every device (the forwards' outputs may differ in the
    last bits, which only changes the v scalars a client sends, never how θ_c is replayed).
    """
    if cfg.hosfl.device == "cuda" or (cfg.hosfl.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("run-config 'hosfl.device'='cuda' but no CUDA device is visible; use 'auto' or 'cpu'")
        return torch.device("cuda")
    return torch.device("cpu")


_CACHE: dict[tuple[object, ...], SplitModel] = {}


def cached_split_model(cfg: RunConfig, num_classes: int, role: str) -> SplitModel:
    """One split model per (config, role) per process; callers load the state they need every time.

    ``role`` keeps the server's model apart from the clients' when both run in one process (the
    in-process runtime); a client always loads its persisted θ_c before using the model.
    """
    key = (role, cfg.task, cfg.hosfl.cut, cfg.lora_r, cfg.lora_alpha, cfg.seed, num_classes, cfg.hf.model,
           cfg.hosfl.device)
    if key not in _CACHE:
        if len(_CACHE) > 4:
            _CACHE.clear()
        _CACHE[key] = build_split_model(cfg, num_classes, role).to(split_device(cfg))
    return _CACHE[key]
