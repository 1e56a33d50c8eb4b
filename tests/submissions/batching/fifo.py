# Oldest first until a limit: valid, but pads chat turns to document length (low capacity).
def schedule(waiting, now):
    picked, longest = [], 0
    for k, (_, length) in enumerate(waiting):
        longest = max(longest, length)
        if len(picked) + 1 > engine.MAX_BATCH or (len(picked) + 1) * longest > engine.MAX_TOKENS:
            break
        picked.append(k)
    return picked
