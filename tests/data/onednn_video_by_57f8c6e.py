"""How tests/data/onednn_video_by_57f8c6e.pt (+ .io.pt) was made: run at 57f8c6e from the repository root with PYTHONPATH=build/python (onednn's first 3-d steps)."""
import torch, torch.nn as nn, torch_delegate
torch_delegate.load_backend("onednn")
class Clip(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 16, (3, 5, 5), (1, 2, 2), (1, 2, 2), bias=False), nn.BatchNorm3d(16), nn.ReLU(),
                                  nn.MaxPool3d((1, 3, 3), (1, 2, 2), (0, 1, 1)))
        self.spatial = nn.Conv3d(16, 16, (1, 3, 3), padding=(0, 1, 1))
        self.temporal = nn.Conv3d(16, 16, (3, 1, 1), padding=(1, 0, 0))
        self.branch = nn.Conv3d(16, 16, 1)
        self.head = nn.Linear(32, 5)
    def forward(self, x):
        x = self.stem(x)
        y = torch.relu(self.temporal(torch.relu(self.spatial(x))) + x)
        y = torch.cat([y, self.branch(y)], 1)
        y = nn.functional.avg_pool3d(y, (1, 2, 2))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool3d(y, 1), 1)) + self.head(y.mean((2, 3, 4)))
torch.manual_seed(41)
m = Clip().eval()
with torch.no_grad():
    bn = m.stem[1]; bn.running_mean.uniform_(-.1, .1); bn.running_var.uniform_(.5, 1.5); bn.weight.uniform_(.5, 1.5); bn.bias.uniform_(-.1, .1)
x = torch.rand(1, 3, 4, 32, 32)
low = torch_delegate.lower(torch.jit.script(m), "onednn", partial=True, example_inputs=(x,))
r = torch_delegate.report(low)
print([reg.backend for reg in r.methods[0].regions], [k.kind for k in r.methods[0].kept])
with torch.no_grad():
    want = m(x)
    print("error", ((low(x) - want).abs().max() / want.abs().max()).item())
low.save("tests/data/onednn_video_by_57f8c6e.pt")
torch.save({"x": x, "want": want}, "tests/data/onednn_video_by_57f8c6e.io.pt")
