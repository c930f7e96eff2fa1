#!/usr/bin/env python3
"""PyTorch interoperability of tinyddp checkpoints, in both directions (run where PyTorch is installed).

  tinyddp -> torch: `export_mlp --out_dir=D` writes a 784-32-10 MLP (mlp.safetensors) and a fixed input
                    with tinyddp's output (io.safetensors). Torch loads the MLP into
                    torch.nn.Sequential(Linear(784, 32), ReLU(), Linear(32, 10)) with
                    load_state_dict(strict=True) and must reproduce the output.
  torch -> tinyddp: torch writes its own randomly initialised MLP (torch_mlp.safetensors) with an input
                    and its output (torch_io.safetensors); `export_mlp --check_dir=D` loads them strictly
                    and must reproduce the output (exit status 0).

Uses the `safetensors` package when it is installed (so its own validating parser reads our file), and a
minimal reader/writer of the format below otherwise. Exit status 0 and a final "PASS" line on success.

  python3 tools/safetensors_torch_check.py --export_mlp .gpu/bin/export_mlp [--workdir /tmp/st_check]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

TOLERANCE = 1e-4  # float32 GEMMs in a different order (Eigen vs PyTorch's CPU kernels)

try:
    import safetensors.torch as st
except ImportError:  # fall back to the format itself
    st = None

_DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16,
           "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8}


def load_file(path):
    if st is not None:
        return st.load_file(path)
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=_DTYPES[info["dtype"]]) if end > begin else \
            torch.empty(0, dtype=_DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"])
    return out


def save_file(tensors, path):
    if st is not None:
        st.save_file(tensors, path, metadata={"format": "pt"})
        return
    names = {v: k for k, v in _DTYPES.items()}
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def make_mlp():
    return torch.nn.Sequential(torch.nn.Linear(784, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def tinyddp_to_torch(binary, workdir):
    subprocess.run([binary, f"--out_dir={workdir}"], check=True)
    model = make_mlp()
    state = load_file(os.path.join(workdir, "mlp.safetensors"))
    model.load_state_dict(state, strict=True)  # raises on any missing/unexpected name or shape mismatch
    io = load_file(os.path.join(workdir, "io.safetensors"))
    with torch.no_grad():
        out = model(io["input"])
    diff = (out - io["output"]).abs().max().item()
    print(f"tinyddp -> torch: load_state_dict(strict=True) ok, max |torch - tinyddp| = {diff:.3g}")
    return diff <= TOLERANCE


def torch_to_tinyddp(binary, workdir):
    torch.manual_seed(0)
    model = make_mlp()
    x = torch.rand(4, 784)
    with torch.no_grad():
        y = model(x)
    save_file(model.state_dict(), os.path.join(workdir, "torch_mlp.safetensors"))
    save_file({"input": x, "output": y}, os.path.join(workdir, "torch_io.safetensors"))
    result = subprocess.run([binary, f"--check_dir={workdir}", f"--tolerance={TOLERANCE}"])
    return result.returncode == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export_mlp", required=True, help="path to the export_mlp binary")
    parser.add_argument("--workdir", default=None, help="where to write the files (default: a temp dir)")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="safetensors_check_")
    os.makedirs(workdir, exist_ok=True)
    print(f"torch {torch.__version__}, reading/writing with "
          f"{'the safetensors package' if st is not None else 'the built-in minimal reader/writer'}, in {workdir}")
    ok = tinyddp_to_torch(args.export_mlp, workdir)
    ok = torch_to_tinyddp(args.export_mlp, workdir) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
