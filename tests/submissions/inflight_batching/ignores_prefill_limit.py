# Collects requests into large groups and admits a whole group while the blocks last, but
# forgets MAX_PREFILL_TOKENS: sixteen prompts padded to the longest ask the engine to prefill
# more tokens in one iteration than it can.
def schedule(waiting, running, free_blocks, now):
    if len(waiting) < 16 and running:
        return []
    picked, budget = [], free_blocks
    for k, (_, length) in enumerate(waiting):
        need = engine.blocks_for(length + 1, engine.BLOCK_SIZE)
        if need > budget or len(running) + len(picked) >= engine.MAX_RUNNING:
            break
        picked.append(k)
        budget -= need
    return picked
