"""How tests/data/onednn_payload2_by_278b26d.pt (+ .io.pt) was made: run at 278b26d from the repository root with PYTHONPATH=build/python (onednn then wrote payload version 2)."""
import torch, torch.nn as nn, torch_delegate
torch_delegate.load_backend("onednn")
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.conv = nn.Conv2d(16, 16, 3, 1, 1)
        self.branch = nn.Conv2d(16, 8, 1)
        self.squeeze = nn.Conv2d(24, 24, 1)
        self.norm = nn.LayerNorm(24)
        self.mix = nn.Linear(24, 24)
        self.head = nn.Linear(24, 5)
    def forward(self, x):
        x = self.stem(x)
        y = torch.relu(self.conv(x)) + x
        y = nn.functional.silu(y)
        y = torch.cat([y, self.branch(y)], 1)
        s = torch.sigmoid(self.squeeze(nn.functional.adaptive_avg_pool2d(y, 1)))
        y = y * s
        z = self.mix(self.norm(y.permute(0, 2, 3, 1))).permute(0, 3, 1, 2)
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(z, 1), 1))
torch.manual_seed(31)
m = Net().eval()
with torch.no_grad():
    bn = m.stem[1]; bn.running_mean.uniform_(-.1,.1); bn.running_var.uniform_(.5,1.5); bn.weight.uniform_(.5,1.5); bn.bias.uniform_(-.1,.1)
x = torch.rand(1, 3, 32, 32)
low = torch_delegate.lower(torch.jit.script(m), "onednn", partial=True, example_inputs=(x,))
r = torch_delegate.report(low)
print([reg.backend for reg in r.methods[0].regions], [k.kind for k in r.methods[0].kept])
with torch.no_grad(): want = m(x)
print(float((low(x)-want).abs().max()))
low.save("tests/data/onednn_payload2_by_278b26d.pt")
torch.save({"x": x, "want": want}, "tests/data/onednn_payload2_by_278b26d.io.pt")
