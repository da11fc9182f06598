"""A tiny regression-fuzzing problem (two close conv nets on 8x8 inputs) shared by the fuzz tests."""

from __future__ import annotations

import textwrap

#: A tiny problem, also run by the subprocesses of the kill -9 test.
TINY = textwrap.dedent('''
    import torch
    from torch import nn

    def tiny_model(seed=0, noise=0.0, classes=3, size=8):
        g = torch.Generator().manual_seed(seed)
        m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * size * size, 16), nn.ReLU(), nn.Linear(16, classes))
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            if noise:
                g2 = torch.Generator().manual_seed(seed + 1)
                for p in m.parameters():
                    p.add_(torch.randn(p.shape, generator=g2) * noise)
        return m.eval()

    def tiny_problem(n=120):
        m1, m2 = tiny_model(0), tiny_model(0, noise=0.15)
        x = torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            y = m1(x).argmax(1)
        y[::10] = (y[::10] + 1) % 3  # a few seeds M1 gets wrong
        return m1, m2, x, y

    class AlwaysPass:
        """A fidelity check that passes everything (the loop's tests need no realism)."""
        def reference(self, roots):
            return roots
        def passes(self, mutants, ref_rows):
            return torch.ones(len(mutants), dtype=torch.bool)
''')
_ns: dict = {}
exec(TINY, _ns)
tiny_model, tiny_problem, AlwaysPass = _ns["tiny_model"], _ns["tiny_problem"], _ns["AlwaysPass"]

DH = dict(strategy="deephunter", criteria="nc", criterion_params={"threshold": 0.5})
