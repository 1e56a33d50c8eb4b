# ATTACK (machine): leaves 150 MB of files in the shared temp folder (tempfile.gettempdir()) and a folder
# of them in /tmp, never cleaned up.
# A secure grader: no new file is left in the real /tmp once grading ends.
import os
import tempfile


def _litter():
    block = os.urandom(1 << 20)
    dirs = {tempfile.gettempdir(), "/tmp"}
    made = []
    for i, d in enumerate(sorted(dirs)):
        sub = os.path.join(d, f"gpu-course-attack-junk-{os.getpid()}-{i}")
        try:
            os.makedirs(sub, exist_ok=True)
            for k in range(3):
                p = os.path.join(sub, f"blob{k}.bin")
                with open(p, "wb") as f:
                    for _ in range(50 // len(dirs)):
                        f.write(block)
                made.append(p)
        except OSError as exc:
            print(f"ATTACK tmp_junk: {sub}: {exc}", flush=True)
    total = sum(os.path.getsize(p) for p in made)
    print(f"ATTACK tmp_junk: left {total >> 20} MiB in {len(made)} files under {sorted(dirs)}", flush=True)


_litter()
