"""A real PyTorch CPU training step for bench/bench_analyze.py: a small conv net.

Forward, backward and SGD on 3 x H x W float batches, on torch's own intra-op
threads (one per core by default): the kind of step that shares the cores
with the data pipeline.
"""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 16, 5, stride=4), nn.ReLU(),
                      nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()


def step(images, labels):
    optimizer.zero_grad()
    loss = loss_fn(model(images), labels % 10)
    loss.backward()
    optimizer.step()
