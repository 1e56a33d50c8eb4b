# Static batching: a new batch only when nothing runs. Requests that arrive behind a long answer
# wait for it: late even at the lightest load.
def schedule(waiting, running, free_blocks, now):
    if running:
        return []
    picked, budget, longest = [], free_blocks, 0
    for k, (_, length) in enumerate(waiting):
        need = engine.blocks_for(length + 1, engine.BLOCK_SIZE)
        longest = max(longest, length)
        if (need > budget or len(picked) >= engine.MAX_RUNNING
                or (len(picked) + 1) * longest > engine.MAX_PREFILL_TOKENS):
            break
        picked.append(k)
        budget -= need
    return picked
