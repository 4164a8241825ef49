"""Generic diagnosers of a module whose parameters are not the reference's.

A module check copies the reference's weights into the student's module by name; when the names
or shapes differ it cannot, and says which. Some differences have one cause:

- every missing name is a bias (``w_1.bias``): the layers were built with ``bias=False``;
- a missing name is an attribute of the student's module holding a plain tensor: it was not
  wrapped in ``nn.Parameter``;
- the unexpected names are those of PyTorch's ``nn.MultiheadAttention`` (``in_proj_weight``);
- the student's parameters have the reference's shapes, in its order, under other layer names
  (``linear1`` where ``w_1`` belongs): the layers were renamed;
- an ``nn.Linear`` weight of shape (in, out) where (out, in) belongs: its two sizes swapped;
- a feed-forward weight four times as wide as d_model where d_ff belongs: d_ff hard-coded.

And when the weights were copied in but the output differs, ``name_unused`` names parameters the
reference's output depends on and the student's does not: a layer's bias left out (its weight
used by hand, ``x @ w.weight.T``), or a whole layer never called (a copy-paste slip such as
``self.w_k(x)`` where ``self.w_q(x)`` belongs).
"""

from __future__ import annotations

import torch
from torch import nn

Named = tuple[str, str]  # (a stable key, the one-sentence "Likely mistake")


def name_parameters(
    student: nn.Module, missing: list[str], extra: list[str], reference: nn.Module | None = None
) -> Named | None:
    """The mistake behind parameter names that differ from the reference's, or None."""
    plain = [key for key in missing if _plain_tensor(student, key)]
    if plain:
        return (
            "params-plain-tensors",
            f"{', '.join(f'`{k}`' for k in plain)} "
            f"{'is a plain tensor' if len(plain) == 1 else 'are plain tensors'}, not "
            "nn.Parameter: wrap them (self.weight = nn.Parameter(torch.ones(d))) so that the "
            "optimiser learns them and the state_dict holds them",
        )
    if any(key.endswith("in_proj_weight") for key in extra):
        return (
            "params-torch-multihead",
            "PyTorch's nn.MultiheadAttention is used where the course's MultiHeadAttention "
            "belongs (it stores W^Q, W^K, W^V as one in_proj_weight): build the block from "
            "transformer_lab's MultiHeadAttention, or your own from lesson 03",
        )
    renamed = _renamed_layers(student, reference, missing, extra) if reference is not None else None
    if renamed:
        pairs = [f"`{mine}` where `{theirs}` belongs" for mine, theirs in renamed]
        return (
            "params-renamed",
            f"your layers have the right shapes under other names ({'; '.join(pairs)}): the "
            "check, and the course's models that load your module's weights, find each layer by "
            "the name the exercise gives it, so keep those names "
            f"({', '.join(f'self.{theirs}' for _, theirs in renamed)})",
        )
    if missing and not extra and all(key.split(".")[-1] == "bias" for key in missing):
        return (
            "params-no-bias",
            "your layers have no biases (bias=False), but the formula adds them (b in x W + b): "
            "keep nn.Linear's default bias=True",
        )
    return None


def name_parameter_shape(key: str, mine: tuple, reference: tuple) -> Named | None:
    """The mistake behind parameter `key` of shape `mine` where `reference` belongs, or None."""
    if len(mine) == 2 and mine == reference[::-1] and key.endswith("weight"):
        layer = key.rsplit(".", 1)[0] if "." in key else "the layer"
        return (
            "params-linear-swapped",
            f"nn.Linear(in_features, out_features) takes the input size first: `{layer}` should "
            f"be nn.Linear({reference[1]}, {reference[0]}), not nn.Linear({mine[1]}, {mine[0]})",
        )
    if len(mine) == 2 and len(reference) == 2 and mine != reference and key.endswith("weight"):
        out, inp = reference
        if mine in ((4 * inp, inp), (out, 4 * out)):  # (d_ff, d_model) or (d_model, d_ff)
            d_model, asked = (inp, out) if mine[1] == inp else (out, inp)
            return (
                "params-hard-coded-width",
                f"the hidden width is {4 * d_model} = 4 × d_model, where the d_ff argument asks "
                f"for {asked}: build the layers from the constructor's d_ff, not from 4·d_model",
            )
    return None


def _renamed_layers(
    student: nn.Module, reference: nn.Module, missing: list[str], extra: list[str]
) -> list[tuple[str, str]] | None:
    """The (student's, reference's) layer names when the only difference is the layers' names:
    the state dicts pair up in order, entry by entry, with the same shape and the same last
    part (`weight`, `bias`); None otherwise."""
    mine, theirs = student.state_dict(), reference.state_dict()
    if not missing or len(mine) != len(theirs):
        return None
    renamed: dict[str, str] = {}
    for (key, value), (ref_key, ref_value) in zip(mine.items(), theirs.items()):
        if value.shape != ref_value.shape or key.rsplit(".", 1)[-1] != ref_key.rsplit(".", 1)[-1]:
            return None
        if key != ref_key:
            if key not in extra or ref_key not in missing:
                return None
            layer, ref_layer = key.rsplit(".", 1)[0], ref_key.rsplit(".", 1)[0]
            if renamed.setdefault(layer, ref_layer) != ref_layer:
                return None
    return list(renamed.items()) or None


def _plain_tensor(module: nn.Module, key: str) -> bool:
    """Whether `key` ('ln.weight') names an attribute of `module` that is a tensor but neither a
    parameter nor a buffer."""
    *path, leaf = key.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            return False
    value = getattr(owner, leaf, None)
    return isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter)


def name_unused(unused: list[str], used: list[str]) -> Named | None:
    """The mistake behind parameters (`unused`) that the reference's output depends on and the
    student's does not, while it depends on the others (`used`); None when nothing is used at all
    (an output cut off from the graph says nothing about which parameter is missing)."""
    if not unused or not used:
        return None
    layer = lambda key: key.rsplit(".", 1)[0]  # noqa: E731
    biases = [k for k in unused if k.endswith(".bias") and f"{layer(k)}.weight" in used]
    if len(biases) == len(unused):
        layers = [f"`{layer(k)}`" for k in biases]
        one = len(layers) == 1
        listed = layers[0] if one else ", ".join(layers[:-1]) + " and " + layers[-1]
        return (
            "bias-unused",
            f"the {'bias' if one else 'biases'} of {listed} never {'reaches' if one else 'reach'} "
            f"your output: {'its weight is' if one else 'their weights are'} used by hand "
            "(x @ layer.weight.T), which leaves the bias out; call the layer itself, "
            f"self.{layer(biases[0])}(...), which adds both",
        )
    names = []  # a layer none of whose parameters is used by its name, else the parameter's
    for key in unused:
        whole = "." in key and not any(u.startswith(layer(key) + ".") for u in used)
        names.append(layer(key) if whole else key)
    names = list(dict.fromkeys(names))
    return (
        "parameter-unused",
        f"{', '.join(f'`{n}`' for n in names)} never {'reaches' if len(names) == 1 else 'reach'} "
        "your output: every layer of the module has its own part in the formula (a copy-paste "
        "slip, such as self.w_k(x) where self.w_q(x) belongs, leaves one out)",
    )
