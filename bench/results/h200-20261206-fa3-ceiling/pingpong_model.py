#!/usr/bin/env python3
"""A toy model of fa3's two consumer warpgroups, written to predict the turn-after-qk tree (not a measurement).

Each warpgroup loops: take the turn, issue Q K^T (tq cycles of tensor work) and P V (tp), pass the turn,
run its softmax (sigma cycles) once its Q K^T is done, then eps cycles (the P V wait, packing, the K/V waits)
before it may take the turn again. The tensor pipe either serves the issued GEMMs in issue order ("fifo") or
shares its rate between the warpgroups that have work ("shared"). The turn passes when the GEMMs are issued
(the shipped kernel) or when the warpgroup's Q K^T has completed (turn-after-qk.patch). Prints the tensor
pipe's busy share.
"""


def busy_share(tq, tp, sigma, eps, pass_at, fifo, issue=40, blocks=300):
    t, busy = 0, 0
    rem = [[], []]
    ready = [0, 0]
    state = ["wait", "wait"]
    soft_end = [0, 0]
    turn, turn_time, issued, order = 0, 0, [0, 0], []
    while min(issued) < blocks:
        for w in (0, 1):
            if state[w] == "wait" and turn == w and t >= ready[w] and t >= turn_time:
                rem[w] = [tq, tp]
                state[w] = "qk"
                issued[w] += 1
                order.append(w)
                if pass_at == "issue":
                    turn, turn_time = 1 - w, t + issue
        active = [w for w in (0, 1) if rem[w]]
        if active:
            busy += 1
            served = [order[0]] if fifo else active
            for w in served:
                rem[w][0] -= 1 / len(served)
                if rem[w][0] <= 0:
                    rem[w].pop(0)
                    if state[w] == "qk":
                        state[w], soft_end[w] = "softmax", t + sigma
                        if pass_at == "qk":
                            turn, turn_time = 1 - w, t + issue
                    if not rem[w] and order and order[0] == w:
                        order.pop(0)
        for w in (0, 1):
            if state[w] == "softmax" and t >= soft_end[w] and not rem[w]:
                state[w], ready[w] = "wait", t + eps
        t += 1
    return busy / t


if __name__ == "__main__":
    # d 128: 64 x 128 x 128 per product and warpgroup, ~580 cycles each at the softmax-free kernel's rate;
    # the softmax ~730 cycles (MUFU-bound, 289 instructions, docs/fa3.md).
    for fifo in (True, False):
        for pass_at in ("issue", "qk"):
            cells = ["sigma %d eps %d: %.3f" % (s, e, busy_share(580, 580, s, e, pass_at, fifo))
                     for s in (730, 1000) for e in (50, 150, 300)]
            print(f"{'fifo' if fifo else 'shared'} pass at {pass_at:5s} " + "; ".join(cells))
