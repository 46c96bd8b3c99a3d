#!/usr/bin/env python3
"""What a PyTorch user runs instead of train_torch: the same models (examples/train_torch/
models.hpp), the same seeded synthetic data (data.hpp), per-worker batch and optimizer (SGD,
momentum 0.9), trained with DistributedDataParallel over the gloo backend with its default
buckets. Started once per worker by benchmarks/torch-vs-ddp.sh (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT in the environment). Rank 0 prints one line per epoch in
train_torch's format: "epoch E/N loss L | S samples/s | step T ms".
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class ResidualBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(4, c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(4, c)

    def forward(self, x):
        y = F.relu(self.norm1(self.conv1(x)))
        return F.relu(x + self.norm2(self.conv2(y)))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.stem_norm = nn.GroupNorm(4, 16)
        self.block1 = ResidualBlock(16)
        self.down2 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        self.block2 = ResidualBlock(32)
        self.down3 = nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False)
        self.block3 = ResidualBlock(64)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.stem_norm(self.stem(x)))
        x = self.block1(x)
        x = self.block2(F.relu(self.down2(x)))
        x = self.block3(F.relu(self.down3(x)))
        return self.head(x.mean((2, 3)))


class TransformerLM(nn.Module):
    def __init__(self, vocab, width, layers, context):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.randn(context, width) * 0.02)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(width, 8, 4 * width, dropout=0.0) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab)

    def forward(self, tokens):
        t = tokens.size(1)
        x = (self.embed(tokens) + self.position[:t]).transpose(0, 1)
        mask = torch.full((t, t), float("-inf")).triu(1)
        for block in self.blocks:
            x = block(x, mask)
        return self.out(self.norm(x.transpose(0, 1)))


def make_images(seed, n):
    torch.manual_seed(seed)
    x = torch.randn(n, 3, 32, 32)
    teacher = torch.randn(3 * 32 * 32, 10)
    return x, x.reshape(n, -1).matmul(teacher).argmax(1)


def make_tokens(seed, n, context, vocab):
    torch.manual_seed(seed)
    perm = torch.randperm(vocab)
    seq = torch.empty(n, context + 1, dtype=torch.long)
    seq[:, 0] = torch.randint(vocab, (n,))
    for t in range(1, context + 1):
        follow = perm.index_select(0, seq[:, t - 1])
        noise = torch.randint(vocab, (n,))
        keep = torch.rand(n) < 0.9
        seq[:, t] = torch.where(keep, follow, noise)
    return seq[:, :context], seq[:, 1:]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", choices=["cnn", "transformer"], default="cnn")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--lr", type=float, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--vocab", type=int, default=16384)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    lm = a.model == "transformer"
    a.batch = a.batch or (8 if lm else 64)
    a.lr = a.lr or (0.1 if lm else 0.05)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    samples = a.batch * a.steps
    if lm:
        inputs, targets = make_tokens(a.seed, samples, a.context, a.vocab)
        torch.manual_seed(a.seed)
        model = TransformerLM(a.vocab, a.width, a.layers, a.context)
    else:
        inputs, targets = make_images(a.seed, samples)
        torch.manual_seed(a.seed)
        model = ResNet()
    ddp = nn.parallel.DistributedDataParallel(model)
    sgd = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
    local = a.batch // n
    if rank == 0:
        count = sum(q.numel() for q in model.parameters())
        print(f"DDP (gloo) training {a.model} ({count} parameters) on {n} workers: "
              f"global batch {a.batch}, {a.steps} steps/epoch", flush=True)
    for e in range(1, a.epochs + 1):
        start = time.perf_counter()
        total = 0.0
        for s in range(a.steps):
            first = s * a.batch + rank * local
            x, y = inputs[first:first + local], targets[first:first + local]
            sgd.zero_grad()
            out = ddp(x)
            loss = F.cross_entropy(out.reshape(-1, out.size(-1)), y.reshape(-1))
            loss.backward()
            sgd.step()
            total += loss.item()
        mean = torch.tensor([total / a.steps], dtype=torch.float64)
        dist.all_reduce(mean)
        seconds = time.perf_counter() - start
        if rank == 0:
            print(f"epoch {e}/{a.epochs} loss {mean.item() / n:.6f} | "
                  f"{a.steps * a.batch / seconds:.2f} samples/s | "
                  f"step {1000 * seconds / a.steps:.1f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
