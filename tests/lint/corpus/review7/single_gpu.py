# Issue-7 review (first-time user, written without reading tests/lint): single_gpu.py.
# Labels converted from the reviewer's "# expect KDPnnn" marks to "# expect: KDPnnn".
"""Plain single-GPU script: nothing distributed, should be clean."""
import torch
from torch.utils.data import DataLoader, TensorDataset

ds = TensorDataset(torch.randn(100, 4), torch.randn(100, 1))
loader = DataLoader(ds, batch_size=8, shuffle=True, pin_memory=True)
model = torch.nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
        if torch.isnan(loss):
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save(model.state_dict(), "model.pt")
with open("done.txt", "w") as f:
    f.write("done")
