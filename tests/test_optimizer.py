"""The project's Adam (:mod:`agents.training.optimizer`): fused, PyTorch's defaults, and still
fused after loading a state that the unfused kind saved."""

from __future__ import annotations

import copy

import torch

from agents.training.optimizer import adam


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=gen)) for shape in [(4, 3), (3,), (1,)]]


def _step(optim: torch.optim.Optimizer, params: list[torch.nn.Parameter], seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    optim.step()


def test_adam_is_fused_with_pytorch_defaults():
    optim = adam(_params(), lr=3e-4)
    group = optim.param_groups[0]
    assert group["fused"] is True and group["foreach"] is None
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (3e-4, (0.9, 0.999), 1e-8, 0)


def test_a_state_saved_by_the_unfused_kind_loads_and_stays_fused():
    old_params = _params()
    old = torch.optim.Adam(old_params, lr=1e-3)
    _step(old, old_params, seed=1)
    saved = copy.deepcopy(old.state_dict())  # as from a file: no tensor shared with `old`
    assert saved["param_groups"][0]["fused"] is None

    params = [torch.nn.Parameter(p.detach().clone()) for p in old_params]
    optim = adam(params, lr=1e-3)
    optim.load_state_dict(saved)
    assert optim.param_groups[0]["fused"] is True
    assert saved["param_groups"][0]["fused"] is None  # the caller's dict is left as it was
    for p, q in zip(params, old_params):
        assert torch.equal(optim.state[p]["exp_avg"], old.state[q]["exp_avg"])
        assert torch.equal(optim.state[p]["exp_avg_sq"], old.state[q]["exp_avg_sq"])
    # the next step runs the fused kernel from the loaded moments: the step counts go on from 1, and
    # the parameters take the unfused kind's second step (to rounding: the kernels differ)
    _step(optim, params, seed=2)
    _step(old, old_params, seed=2)
    for p, q in zip(params, old_params):
        assert optim.state[p]["step"].item() == 2.0
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
