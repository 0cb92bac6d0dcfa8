import time, torch, torch.nn as nn, os, sys
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 16, 5, stride=4), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
lossf = nn.CrossEntropyLoss()
def step(images, labels):
    opt.zero_grad()
    loss = lossf(model(images), labels % 10)
    loss.backward()
    opt.step()
if __name__ == "__main__":
    x = torch.rand(32, 3, 224, 224); y = torch.zeros(32, dtype=torch.int64)
    for _ in range(3): step(x, y)
    t0 = time.perf_counter(); c0 = time.process_time(); n = 0
    while time.perf_counter() - t0 < 3: step(x, y); n += 1
    el = time.perf_counter() - t0
    print("threads", torch.get_num_threads(), "G", n*32/el, "cpu/sample ms", (time.process_time()-c0)/(n*32)*1e3, "cores busy", (time.process_time()-c0)/el)
    # spin tail: cpu consumed during a sleep after a step
    c0 = time.process_time(); t0=time.perf_counter()
    for _ in range(20):
        step(x, y); c1 = time.process_time(); time.sleep(0.05); 
    print("cpu over 20x(step+50ms sleep)", time.process_time()-c0, "wall", time.perf_counter()-t0)
