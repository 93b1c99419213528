#!/usr/bin/env python3
"""Which expert torch.topk keeps when two probabilities tie at the k-th place,
on the CPU and (where there is one) on CUDA: the rule qwenref's routers follow
(docs/moe.md, "Ties on the GPU"). For each (experts, k) it plants a tie between
the k-th and (k+1)-th largest of random values and prints, per trial, whether
the lower index ("low") or the higher ("high") was kept.

    python3 scripts/torch-topk-ties.py
"""
import torch


def main():
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for n, k in ((8, 2), (8, 3), (256, 8), (512, 10)):
        for dev in devices:
            kept = []
            for trial in range(4):
                g = torch.Generator().manual_seed(trial)
                p = torch.rand(n, generator=g)
                order = torch.argsort(p, descending=True)
                a, b = order[k - 1].item(), order[k].item()
                lo, hi = min(a, b), max(a, b)
                p[hi] = p[lo]  # the k-th and (k+1)-th largest now tie
                top = torch.topk(p.to(dev), k).indices.cpu().tolist()
                kept.append("low" if lo in top and hi not in top else "high" if hi in top else "?")
            print(f"topk ties n={n} k={k} {dev}: tied pair kept {kept}")


if __name__ == "__main__":
    main()
