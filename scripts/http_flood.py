"""The flood loop shared by scripts/attacker.py and scripts/attack-probe.py:
after a request head, keep sending one piece of body or headers until the
server has something to say (the socket is readable), closes, max_bytes are
sent or `seconds` pass."""
import select
import time


def send_until_answered(s, head, piece, max_bytes, seconds):
    """Returns the bytes of piece sent; leaves s blocking with a 5 s timeout,
    ready to read the answer."""
    s.sendall(head)
    s.setblocking(False)
    sent, t0 = 0, time.time()
    while sent < max_bytes and time.time() - t0 < seconds:
        r, w, _ = select.select([s], [s], [], 0.1)
        if r:
            break
        if w:
            try:
                sent += s.send(piece)
            except BlockingIOError:
                pass
            except OSError:
                break
    s.setblocking(True)
    s.settimeout(5)
    return sent
