"""Where `memledger trace` gets its models: a Hugging Face config.json, shrunk and built from
scratch (random weights, nothing downloaded), or the user's own `module:function`.

The user contract (`--module MOD:FUNCTION`): FUNCTION takes no arguments and returns
`(model, make_inputs)`: a torch.nn.Module, and a callable `make_inputs(batch, seq)` returning
the inputs of one training forward of `batch` sequences of `seq` tokens (a dict of keyword
arguments, or a tuple of positional ones). MOD is a dotted module name importable from the
current directory (as `python -m` would), or a path to a .py file. The module is imported, as
pytest imports a test file: it is the user's own code; no string is ever evaluated.
The model is put in train mode; whatever the forward returns is kept alive until the trace
ends (return the loss or the output); tokens = batch·seq.
torch and transformers are imported lazily, inside these functions.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path

from memledger.errors import SpecError
from memledger.trace.shrink import BUILD_TYPE, Shrink

CONTRACT = ("MOD:FUNCTION must name a function that takes no arguments and returns "
            "(model, make_inputs), make_inputs(batch, seq) returning a dict or tuple of inputs")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def load_function(target: str):
    """The callable named by "pkg.mod:function" or "path/to/file.py:function"."""
    mod_name, sep, fn_name = target.rpartition(":")
    if not sep or not mod_name or not _NAME.match(fn_name):
        raise SpecError("module", f"expected MOD:FUNCTION (e.g. mymodels:build), got {target!r}")
    if mod_name.endswith(".py") or os.sep in mod_name:
        path = Path(mod_name)
        if not path.is_file():
            raise SpecError("module", f"no such file {mod_name!r}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        loader = lambda: spec.loader.exec_module(module)  # noqa: E731
    else:
        module, loader = None, None
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())  # what `python -m` does: import from here
    try:
        if loader:
            loader()
        else:
            module = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name and mod_name.startswith(e.name):
            raise SpecError("module", f"cannot import {mod_name!r}: no module named {e.name!r}") from None
        raise SpecError("module", f"importing {mod_name!r} failed: {type(e).__name__}: {e}") from None
    except Exception as e:  # the user's module raised while importing: say so in one line
        raise SpecError("module", f"importing {mod_name!r} failed: {type(e).__name__}: {e}") from None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    fn = getattr(module, fn_name, None)
    if fn is None:
        raise SpecError("module", f"module {mod_name!r} has no attribute {fn_name!r}")
    if not callable(fn):
        raise SpecError("module", f"{target} is a {type(fn).__name__}, not a function")
    return fn


class ModuleSource:
    """Traces of the model a user function builds; widths are the user's (no width fit)."""

    def __init__(self, target: str):
        self.target = target
        self.fn = load_function(target)
        self._built = None

    def _build(self):
        import torch
        if self._built is None:
            try:
                got = self.fn()
            except Exception as e:
                raise SpecError("module", f"{self.target}() failed: {type(e).__name__}: {e}") from None
            if not (isinstance(got, (tuple, list)) and len(got) == 2
                    and isinstance(got[0], torch.nn.Module) and callable(got[1])):
                raise SpecError("module", f"{self.target} returned {type(got).__name__}; {CONTRACT}")
            self._built = got
        return self._built

    def meta(self) -> dict:
        return {"source": f"module {self.target}"}

    def trace(self, seq: int, divisor: int, batch: int):
        from memledger.trace.tracer import trace_saved
        model, make_inputs = self._build()
        try:
            inputs = make_inputs(batch, seq)
        except Exception as e:
            raise SpecError("module", f"make_inputs({batch}, {seq}) failed: {type(e).__name__}: {e}") from None
        model.train()
        return trace_saved(model, inputs, tokens=batch * seq, meta={"batch": batch, "seq": seq})


def resolve_device(choice: str) -> str:
    """"auto" -> "cuda" when torch sees a GPU, else "cpu"; "cuda" without one is an error."""
    import torch
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise SpecError("device", "cuda requested but torch sees no GPU")
    return choice


class ConfigSource:
    """Traces of a Hugging Face config's model at width divisor `divisor` (see shrink.py)."""

    def __init__(self, cfg: dict, shrink: Shrink, *, precision: str = "bf16",
                 attention: str = "flash", experts: str = "grouped_mm", device: str = "auto",
                 seed: int = 0):
        self.cfg, self.shrink, self.precision, self.seed = cfg, shrink, precision, seed
        self.attention, self.experts = attention, experts
        self.device = resolve_device(device)
        self._model = (None, None)  # (divisor, model): one model alive at a time

    def meta(self) -> dict:
        return {"device": self.device, "precision": self.precision, "attention": self.attention,
                "experts": self.experts, "scale": self.shrink.k, "layers": self.shrink.layers,
                "experts_scaled": self.shrink.experts}

    def model(self, divisor: int):
        import torch
        import transformers
        if self._model[0] == divisor:
            return self._model[1]
        self._model = (None, None)
        cfg = dict(self.shrink.config(self.cfg, divisor))
        mt = cfg.pop("model_type")
        transformers.logging.set_verbosity_error()
        extra = {"experts_implementation": self.experts} if "num_experts_per_tok" in cfg else {}
        try:
            conf = transformers.AutoConfig.for_model(BUILD_TYPE.get(mt, mt), **cfg, **extra)
            torch.manual_seed(self.seed)
            model = transformers.AutoModelForCausalLM.from_config(
                conf, attn_implementation="eager" if self.attention == "eager" else "sdpa")
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise SpecError("config", f"transformers cannot build model_type {mt!r} at width "
                                      f"/{divisor}: {type(e).__name__}: {e}") from None
        model.to(self.device)
        if self.precision == "bf16":
            model.to(torch.bfloat16)
        self._model = (divisor, model)
        return model

    def trace(self, seq: int, divisor: int, batch: int):
        import torch

        from memledger.trace.hf import trace_causal_lm
        amp = torch.bfloat16 if self.precision == "amp" else None
        return trace_causal_lm(self.model(divisor), batch, seq, autocast_dtype=amp, seed=self.seed,
                               meta={"divisor": divisor})
