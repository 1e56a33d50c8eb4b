# ATTACK (abort): from inside vector_add, writes a well-framed but empty reply ("ok", no results) to the
# grader's socket, waits until the grader's next request (for the next exercise) has arrived unread, and
# exits: the kernel resets the connection, and today's parent gets ConnectionResetError (an OSError it
# does not catch) instead of an end of file. Needs two exercises in the run.
# A secure grader: `autograder grade` exits 0, this submission is in grades.csv with 0 points, and the
# other submissions of the batch are graded as usual.
import os
import stat
import struct
import time


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
        return
    os.write(fd, _frame(b'{"kind": "run", "ok": true, "results": []}') + _frame(struct.pack("<I", 0)))
    time.sleep(1.0)  # the grader judges the empty reply and sends its next request, which nobody reads
    os._exit(0)


def saxpy(alpha, x, y, out):
    pass
