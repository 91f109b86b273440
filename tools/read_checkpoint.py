#!/usr/bin/python3
"""tools/read_checkpoint.py: open a checkpoint of ours in PyTorch, with nothing but torch.

Our checkpoints are safetensors files (8-byte little-endian header length, JSON header, raw
little-endian data). The `safetensors` package reads them directly (safetensors.torch.load_file);
this script shows that plain PyTorch can too: tools/safetensors_file.py parses the file with the
standard library, and torch.frombuffer views each tensor's bytes. It prints every tensor's name,
shape and a summary.

    /usr/bin/python3 tools/read_checkpoint.py runs/vit/last.safetensors
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_file  # noqa: E402

DTYPES = {"F32": torch.float32, "I32": torch.int32, "F64": torch.float64, "I64": torch.int64}


def load(path):
    header, meta, data = safetensors_file.load(path)
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        t = torch.frombuffer(data[begin:end], dtype=DTYPES[info["dtype"]]) if end > begin else torch.zeros(0)
        tensors[name] = t.reshape(info["shape"])
    return tensors, meta


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        tensors, meta = load(sys.argv[1])
    except ValueError as e:
        sys.exit(f"read_checkpoint.py: {e}")
    print(f"{sys.argv[1]}: {len(tensors)} tensors, metadata {meta}")
    for name, t in tensors.items():
        f = t.float()
        print(f"  {name:40s} {str(list(t.shape)):16s} mean {f.mean():+.4f} std {f.std() if f.numel() > 1 else 0:.4f}")


if __name__ == "__main__":
    main()
