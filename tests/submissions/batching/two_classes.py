# Chat turns with chat turns, documents with documents: most of the reference's gain.
def schedule(waiting, now):
    short = waiting[0][1] <= 64
    picked, longest = [], 0
    for k, (_, length) in enumerate(waiting):
        if (length <= 64) != short:
            continue
        longest = max(longest, length)
        if len(picked) + 1 > engine.MAX_BATCH or (len(picked) + 1) * longest > engine.MAX_TOKENS:
            break
        picked.append(k)
    return picked
