# Admits while the prompts fit, keeping nothing back for the running requests to grow: it
# over-admits, and the engine preempts (the feedback counts the preemptions).
def schedule(waiting, running, free_blocks, now):
    picked, budget, longest = [], free_blocks, 0
    for k, (_, length) in enumerate(waiting):
        need = engine.blocks_for(length + 1, engine.BLOCK_SIZE)
        longest = max(longest, length)
        if (need > budget or len(running) + len(picked) >= engine.MAX_RUNNING
                or (len(picked) + 1) * longest > engine.MAX_PREFILL_TOKENS):
            break
        picked.append(k)
        budget -= need
    return picked
