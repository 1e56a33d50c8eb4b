# Reserves room for the longest answer the engine allows (MAX_OUTPUT tokens) for every request:
# never preempts, but runs few requests at once. Valid, partial speed points.
def schedule(waiting, running, free_blocks, now):
    B = engine.BLOCK_SIZE
    budget = free_blocks - sum(engine.blocks_for(p + engine.MAX_OUTPUT, B) - engine.blocks_for(p + g, B)
                               for p, g in running)
    picked, longest = [], 0
    for k, (_, length) in enumerate(waiting):
        need = engine.blocks_for(length + engine.MAX_OUTPUT, B)
        longest = max(longest, length)
        if (need > budget or len(running) + len(picked) >= engine.MAX_RUNNING
                or (len(picked) + 1) * longest > engine.MAX_PREFILL_TOKENS):
            break
        picked.append(k)
        budget -= need
    return picked
