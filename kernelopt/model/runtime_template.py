"""The code a composed model (optimized.py) runs: each replacement's program loaded as a module
of its own, built with the hot spot's constructor arguments, given the in-model submodule's
parameters and buffers, and swapped in. Kept as text: it is written into the composed file."""

RUNTIME = r'''
# --- composition (written by `kernelopt model compose`) ---
import sys as _sys
import types as _types


def _load_replacement(index, entry):
    name = f"{__name__}_replacement_{index}"
    module = _types.ModuleType(name)
    module.__file__ = f"<replacement for {entry['path']}>"
    _sys.modules[name] = module
    exec(compile(entry["source"], module.__file__, "exec"), module.__dict__)
    new_class = getattr(module, "ModelNew", None)
    if not isinstance(new_class, type):
        raise RuntimeError(f"the replacement for `{entry['path']}` defines no class ModelNew")
    return new_class


def _adopt_state(entry, new_class, original):
    """Builds the replacement, and maps each of its state entries to the original submodule's:
    the two built from one seed (`build` makes a fresh original), a replacement's weights equal
    the original's; matched by name first, then by value."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        probe = entry["build"]()
        torch.manual_seed(0)
        new = new_class(*entry["init_args"])
    probe_state, original_state = probe.state_dict(), original.state_dict()
    values = {}
    for name, tensor in new.state_dict().items():
        same = probe_state.get(name)
        if same is not None and same.shape == tensor.shape and torch.equal(same, tensor):
            values[name] = original_state[name]
            continue
        matches = [k for k, v in probe_state.items()
                   if v.shape == tensor.shape and v.dtype == tensor.dtype and torch.equal(v, tensor)]
        if not matches or any(not torch.equal(original_state[m], original_state[matches[0]]) for m in matches):
            raise RuntimeError(f"the replacement for `{entry['path']}`: its state entry `{name}` matches "
                               f"{'none' if not matches else 'several different'} of the submodule's "
                               "(build its parameters like the original's, in the same order)")
        values[name] = original_state[matches[0]]
    new.load_state_dict(values)
    return new.train(original.training)


class ModelNew(nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()
        self.model = Model(*init_inputs)
        for index, entry in enumerate(_REPLACEMENTS):
            original = self.model.get_submodule(entry["path"])
            new = _adopt_state(entry, _load_replacement(index, entry), original)
            parent, _, leaf = entry["path"].rpartition(".")
            setattr(self.model.get_submodule(parent) if parent else self.model, leaf, new)

    def forward(self, *inputs):
        return self.model(*inputs)
'''
