# The solution's policy: first come, first served, keeping one free block per running request,
# so the next iteration never preempts. Full marks.
def schedule(waiting, running, free_blocks, now):
    budget = free_blocks - len(running)
    picked, longest = [], 0
    for k, (_, length) in enumerate(waiting):
        need = engine.blocks_for(length + 1, engine.BLOCK_SIZE)
        longest = max(longest, length)
        if (need > budget or len(running) + len(picked) >= engine.MAX_RUNNING
                or (len(picked) + 1) * longest > engine.MAX_PREFILL_TOKENS):
            break
        picked.append(k)
        budget -= need
    return picked
