"""formulas: the closed-form times of one all-reduce of M bytes that the push_pull model
(flow_model.py) is measured against: the parameter server's bounds for its three placements
(../shared/MISSION.md) and ring all-reduce. Python 3 standard library only.
"""


def bound_ps(n, k, m, b):
    return max(m / b, n * m / (k * b))


def bound_colocated(n, m, b):
    return 2.0 * (n - 1) / n * m / b


def bound_mixed(n, k, m, b):
    return 2.0 * n * (n - 1) * m / ((n * n + k * n - 2 * k) * b)


def ring_formula(n, m, b):
    return 2.0 * (n - 1) / n * m / b


def ring_model(n, m, b, eff, latency):
    """Ring all-reduce with TCP's efficiency and one message latency per step (2(n-1) steps)."""
    return 2.0 * (n - 1) / n * m / (b * eff) + 2 * (n - 1) * latency


def bound_of(p):
    n, k, m, b = p["n"], p["k"], p["size"], p["rate_bps"] / 8
    if p["placement"] == "ps":
        return bound_ps(n, k, m, b), "max(M/B, nM/(kB))"
    if p["placement"] == "colocated":
        return bound_colocated(n, m, b), "2(n-1)/n M/B"
    return bound_mixed(n, k, m, b), "2n(n-1)M/((n^2+kn-2k)B)"
