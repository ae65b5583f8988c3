"""How tests/data/onednn_audio_by_c700280.pt (+ .io.pt) was made: run at c700280 from the repository root with PYTHONPATH=build/python (onednn's first 1-d convolutions)."""
import torch, torch.nn as nn, torch_delegate
torch_delegate.load_backend("onednn")
torch.manual_seed(43)
m = nn.Sequential(nn.Conv1d(1, 16, 11, 2, 5, bias=False), nn.BatchNorm1d(16), nn.ReLU(),
                  nn.Conv1d(16, 16, 3, padding=2, dilation=2, groups=4), nn.ReLU(), nn.Conv1d(16, 8, 1)).eval()
with torch.no_grad():
    bn = m[1]; bn.running_mean.uniform_(-.1, .1); bn.running_var.uniform_(.5, 1.5); bn.weight.uniform_(.5, 1.5); bn.bias.uniform_(-.1, .1)
x = torch.rand(1, 1, 200)
low = torch_delegate.lower(torch.jit.freeze(torch.jit.script(m), optimize_numerics=False), "onednn", partial=True, example_inputs=(x,))
r = torch_delegate.report(low)
print([reg.backend for reg in r.methods[0].regions], [k.kind for k in r.methods[0].kept])
with torch.no_grad():
    want = m(x)
    print("error", ((low(x) - want).abs().max() / want.abs().max()).item())
low.save("tests/data/onednn_audio_by_c700280.pt")
torch.save({"x": x, "want": want}, "tests/data/onednn_audio_by_c700280.io.pt")
