def schedule(waiting, running, free_blocks, now):
    return engine.reference_schedule(waiting, running, free_blocks, now)
