# Attacks fabprobe's data ports (one process, select loop): a port scan around each port,
# slow-drip connections (a byte every 3 s, replaced when dropped), and every 0.2 s a round
# of garbage, an oversize frame, a frame with terminal escapes, a wrong-token handshake and
# a fake rank claiming its target's ring link (right token, foreign address).
# usage: attack_data.py TOKEN SECONDS DRIPS_PER_TARGET IP:PORT:FROM:TO ...
import json, os, random, select, socket, struct, sys, time

token, seconds, drips = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
targets = []
for t in sys.argv[4:]:
    ip, port, frm, to = t.split(":")
    targets.append((ip, int(port), int(frm), int(to)))
end = time.time() + seconds

def conn(ip, port, block=False):
    s = socket.socket()
    s.setblocking(block)
    try:
        s.connect((ip, port))
    except (BlockingIOError, OSError):
        pass
    return s

def frame(obj):
    b = json.dumps(obj).encode()
    return b"FPH1" + struct.pack(">I", len(b)) + b

def shot(ip, port, data):
    try:
        s = socket.create_connection((ip, port), timeout=0.5)
        s.sendall(data)
        s.settimeout(0.3)
        try:
            s.recv(4096)
        except OSError:
            pass
        s.close()
    except OSError:
        pass

# Port scan: connect and close at once, on and around every data port.
for ip, port, _, _ in targets:
    for p in range(max(1, port - 20), port + 21):
        try:
            socket.create_connection((ip, p), timeout=0.2).close()
        except OSError:
            pass

dripping = {}  # socket -> (target, next byte index)
def refill():
    for t in targets:
        have = sum(1 for v in dripping.values() if v[0] == t)
        for _ in range(drips - have):
            dripping[conn(t[0], t[1])] = (t, 0)

payload = b"FPH1" + struct.pack(">I", 60) + b" " * 60
last_drip = 0
while time.time() < end:
    refill()
    if time.time() - last_drip >= 3:
        last_drip = time.time()
        for s in list(dripping):
            t, i = dripping[s]
            try:
                s.send(payload[i:i + 1])
                dripping[s] = (t, i + 1)
            except OSError:
                s.close()
                del dripping[s]
    for ip, port, frm, to in targets:
        shot(ip, port, os.urandom(random.randint(1, 2048)))
        shot(ip, port, b"FPH1" + struct.pack(">I", 0xFFFFFFFF))
        shot(ip, port, b"FPH1" + struct.pack(">I", 40) + b"\x1b[31mPWNED\x1b[0m\x07" + b"x" * 24)
        shot(ip, port, frame({"token": "\x1b[31mPWNED", "from_rank": frm, "to_rank": to, "channel": 0}))
        shot(ip, port, frame({"token": token, "from_rank": frm, "to_rank": to, "channel": 0}))
        shot(ip, port, frame({"token": token, "from_rank": frm, "to_rank": to, "channel": 1}))
    time.sleep(0.2)
