"""Reads a safetensors file (8-byte little-endian header length, JSON header, raw little-endian tensor bytes)
into torch tensors, without the safetensors package."""
import json
import struct

import torch

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "U8": torch.uint8, "BOOL": torch.bool,
}


def read_safetensors(path):
    """Returns ({name: tensor}, {metadata key: value})."""
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    metadata = header.pop("__metadata__", {})
    body = data[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        if end > begin:
            flat = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype)
        else:
            flat = torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(info["shape"])
    return tensors, metadata
