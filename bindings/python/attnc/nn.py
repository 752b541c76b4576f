"""attnc.nn.Attention: an attention variant as a torch module that holds the
variant's learned tensors (low-rank E and F, per-head values) as
parameters, initialised as attnc initialises them."""
from typing import Optional

import torch

from ._torch import attention


class Attention(torch.nn.Module):
    """Attention variant `name` of `spec` on [B, H, N, D] tensors.

    heads and head_dim fix the shape class the kernels are compiled for;
    seq_len is the longest N (a low-rank variant's E and F have that many
    columns). Learned tensors are in `self.weights` (a ParameterDict), the
    others (LSH rotations, constant per-head values) are buffers.
    """

    def __init__(self, spec: str, name: Optional[str] = None, *, heads: int, head_dim: int,
                 seq_len: int, seed: int = 0):
        super().__init__()
        self.fn = attention(spec, name)
        _, var = self.fn.variant(heads, head_dim, seq_len, False)
        if not any(p.name == "E" for p in var.params):  # only low-rank kernels take max_seq
            _, var = self.fn.variant(heads, head_dim, 0, False)
        self.variant_name = var.name
        self.weights = torch.nn.ParameterDict()
        self._constant_names = []
        for p, value in zip(var.params, var.init_params(seed)):
            t = torch.from_numpy(value)
            if p.learned:
                self.weights[p.name] = torch.nn.Parameter(t)
            else:
                self.register_buffer("const_" + p.name, t)
                self._constant_names.append(p.name)

    def forward(self, q, k, v, lengths=None):
        weights = dict(self.weights.items())
        for n in self._constant_names:
            weights[n] = getattr(self, "const_" + n)
        return self.fn(q, k, v, lengths=lengths, **weights)
