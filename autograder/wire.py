"""Messages between the grader and its worker, over a socket.

Parent to worker: pickles (the parent is trusted). Worker to parent: JSON plus raw
array bytes, decoded without ever unpickling, so learner code cannot smuggle code
into the parent. Arrays must be plain numeric dtypes.
"""
from __future__ import annotations

import json
import pickle
import socket
import struct

import numpy as np

MAX_MESSAGE = 1 << 31
_ALLOWED_KINDS = set("biuf")
# Bound at import: the CUDA simulator swaps names while kernels run.
_NP_SCALARS = (np.floating, np.integer, np.bool_)
_NDARRAY = np.ndarray


def _send_bytes(sock: socket.socket, data: bytes) -> None:
    sock.sendall(struct.pack("<Q", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return bytes(buf)


def _recv_bytes(sock: socket.socket) -> bytes:
    (n,) = struct.unpack("<Q", _recv_exact(sock, 8))
    if n > MAX_MESSAGE:
        raise ValueError(f"message of {n} bytes is too large")
    return _recv_exact(sock, n)


def send_trusted(sock: socket.socket, obj) -> None:
    _send_bytes(sock, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def recv_trusted(sock: socket.socket):
    return pickle.loads(_recv_bytes(sock))


def send(sock: socket.socket, obj) -> None:
    blobs: list[bytes] = []

    def enc(o):
        if isinstance(o, _NDARRAY):
            a = np.ascontiguousarray(o)
            blobs.append(a.tobytes())
            return {"__nd__": len(blobs) - 1, "dtype": a.dtype.str, "shape": list(a.shape)}
        if isinstance(o, dict):
            return {str(k): enc(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [enc(v) for v in o]
        if isinstance(o, _NP_SCALARS):
            return o.item()
        if isinstance(o, float) and o != o:
            return {"__nan__": True}
        return o

    header = json.dumps(enc(obj)).encode()
    _send_bytes(sock, header)
    _send_bytes(sock, struct.pack("<I", len(blobs)))
    for b in blobs:
        _send_bytes(sock, b)


def recv(sock: socket.socket):
    """Decode a worker's message: JSON and numeric arrays only."""
    header = json.loads(_recv_bytes(sock))
    (count,) = struct.unpack("<I", _recv_bytes(sock))
    blobs = [_recv_bytes(sock) for _ in range(count)]

    def dec(o):
        if isinstance(o, dict):
            if "__nd__" in o:
                dtype = np.dtype(str(o["dtype"]))
                if dtype.kind not in _ALLOWED_KINDS:
                    raise ValueError(f"refusing array of dtype {dtype}")
                shape = tuple(int(s) for s in o["shape"])
                return np.frombuffer(blobs[int(o["__nd__"])], dtype=dtype).reshape(shape)
            if o.get("__nan__") is True:
                return float("nan")
            return {k: dec(v) for k, v in o.items()}
        if isinstance(o, list):
            return [dec(v) for v in o]
        return o

    return dec(header)
