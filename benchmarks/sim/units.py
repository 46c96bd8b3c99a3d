"""units: the byte and rate units of the push_pull model (flow_model.py, psim.py): parsing what
a user types, and the short texts the tables print. Python 3 standard library only.
"""

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def parse_bytes(text):
    """'64M' / '64MiB' / '1G' / '4096000' -> bytes (K, M, G are powers of 1024, as bps-bench's)."""
    t = str(text).strip().lower().replace("ib", "").replace("b", "")
    mult = 1
    if t and t[-1] in "kmg":
        mult = {"k": KIB, "m": MIB, "g": GIB}[t[-1]]
        t = t[:-1]
    return int(round(float(t) * mult))


def parse_rate(text):
    """'1gbit' / '25g' / '400mbit' / '1e9' -> bits per second (decimal, as tbf's)."""
    t = str(text).strip().lower().replace("bit", "").replace("bps", "").replace("/s", "")
    mult = 1.0
    if t and t[-1] in "kmg":
        mult = {"k": 1e3, "m": 1e6, "g": 1e9}[t[-1]]
        t = t[:-1]
    return float(t) * mult


def fmt_bytes(b):
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if b >= size and b % size == 0:
            return "%d %s" % (b // size, unit)
    return "%d B" % b


def fmt_rate(bps):
    return ("%g Gbit/s" % (bps / 1e9)) if bps >= 1e9 else ("%g Mbit/s" % (bps / 1e6))



def short_bytes(b):
    for unit, size in (("G", GIB), ("M", MIB), ("K", KIB)):
        if b >= size and b % size == 0:
            return "%d%s" % (b // size, unit)
    return "%.0fK" % (b / KIB) if b >= KIB else "%dB" % b


def parts_short(parts):
    text = "%dx%s" % (len(parts), short_bytes(parts[0]))
    return text if parts[-1] == parts[0] else text + "(+%s)" % short_bytes(parts[-1])


def parts_text(parts):
    if len(set(parts)) == 1:
        return "%d x %s" % (len(parts), fmt_bytes(parts[0]))
    return "%d x %s (last %s)" % (len(parts), fmt_bytes(parts[0]), fmt_bytes(parts[-1]))
