"""How tests/data/onednn_payload4_by_e41953a.pt (+ .io.pt) was made: run at e41953a from the repository root with PYTHONPATH=build/python (onednn then wrote payload version 4)."""
import torch, torch.nn as nn, torch_delegate
torch_delegate.load_backend("onednn")
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 2, 1)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.embed = nn.Linear(8, 32)
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)
        self.head = nn.Linear(32, 5)
    def forward(self, x):
        y = self.up(torch.relu(self.stem(x)))
        b, c, h, w = y.shape
        t = self.embed(y.reshape(b, c, h * w).transpose(1, 2))
        a = self.attention(t, t, t, need_weights=False)[0]
        return self.head(a + t)
torch.manual_seed(47)
m = Net().eval()
x = torch.rand(1, 3, 16, 16)
low = torch_delegate.lower(torch.jit.script(m), "onednn", partial=True, example_inputs=(x,))
r = torch_delegate.report(low)
print([reg.backend for reg in r.methods[0].regions], [k.kind for k in r.methods[0].kept])
other = torch.rand(2, 3, 12, 20)
with torch.no_grad(): want, want_other = m(x), m(other)
print(float((low(x)-want).abs().max()), float((low(other)-want_other).abs().max()))
low.save("tests/data/onednn_payload4_by_e41953a.pt")
torch.save({"x": x, "want": want, "other": other, "want_other": want_other}, "tests/data/onednn_payload4_by_e41953a.io.pt")
